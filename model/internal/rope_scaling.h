// rope_scaling.h: the RoPE scaling recipes both loaders turn into per-pair
// frequency divisors (ModelConfig::rope_freq_factors) and a rotation
// magnitude (ModelConfig::rope_mscale). docs/model.md "RoPE scaling".
#ifndef RAGKV_MODEL_INTERNAL_ROPE_SCALING_H_
#define RAGKV_MODEL_INTERNAL_ROPE_SCALING_H_

#include <vector>

namespace ragkv::model::internal {

// Llama3RopeFactors: rope_type "llama3" (Meta's Llama-3.1 recipe, as
// llama.cpp's converter writes rope_freqs.weight): 1 for wavelengths under
// original/high_freq_factor, `factor` over original/low_freq_factor, a
// smooth blend between.
std::vector<float> Llama3RopeFactors(double theta, int head_dim, double factor, double low,
                                     double high, double original);

// YarnParams: a YaRN block (Qwen2.5 long context). `factor` >= 1 is the
// context extension, `original` the pretrained context, beta_fast/slow the
// rotation counts that bound the ramp (YaRN's defaults 32 / 1).
struct YarnParams {
  double factor = 1;
  double original = 0;
  double beta_fast = 32;
  double beta_slow = 1;
};

// YarnRopeFactors: YaRN as per-pair divisors: pair j turns at
// inv_freq_j * (s * (1 - ramp_j) + ramp_j) with s = 1/factor, where ramp_j
// is 1 below the low correction dim (high-frequency pairs: extrapolated),
// 0 above the high one (low-frequency pairs: interpolated), linear between;
// the correction dims are floor/ceil of
// head_dim * ln(original / (beta * 2 pi)) / (2 ln theta), clamped to
// [0, head_dim - 1] (llama.cpp's ggml_rope_yarn_corr_dims, HF's
// find_correction_range with truncation).
std::vector<float> YarnRopeFactors(double theta, int head_dim, const YarnParams& p);

// YarnMscale: YaRN's magnitude 0.1 ln(factor) + 1 (1 for factor <= 1).
double YarnMscale(double factor);

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_ROPE_SCALING_H_
