// random_model.h: seeded random-weight GGUF models of every architecture
// and RoPE variant ragkv reads (GQA: 4 query heads over 2 KV heads), for
// the llama.cpp oracle tests and the benches' `moe:` / `gemma3:` specs.
#ifndef RAGKV_TESTS_SUPPORT_RANDOM_MODEL_H_
#define RAGKV_TESTS_SUPPORT_RANDOM_MODEL_H_

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/gguf_writer.h"

namespace ragkv::testing {

struct Variant {
  std::string name;
  std::string arch;       // llama | qwen2 | qwen3 | phi3 (fused attn_qkv and ffn_up) | qwen3moe | gemma3
  bool rope_freqs = false;
  float linear_factor = 0;  // > 0: rope.scaling.type linear
  float yarn_factor = 0;    // > 0: rope.scaling.type yarn (original context 32768)
  float attn_factor = 0;    // > 0: rope.scaling.attn_factor
  float scale_linear = 0;   // > 0: the old rope.scale_linear key, no type key
  // Extra keys, written last: <arch>.KEY = f32 value; rope.scaling.type.
  std::vector<std::pair<std::string, float>> kv_f32 = {};
  std::string scaling_type = {};
  int rope_dims = 0;  // > 0: rope.dimension_count (default head_dim)
  uint32_t yarn_original = 32768;  // rope.scaling.original_context_length with yarn_factor
  uint32_t sliding_window = 0;     // > 0: <arch>.attention.sliding_window (phi3)
  bool longrope = false;           // rope_factors_long/short.weight (Phi-3 128k)
  bool unfused = false;            // phi3 with separate attn_q/k/v (not what llama.cpp writes)
  // Mixture of experts (qwen3moe; llama with experts = Mixtral): experts > 0
  // writes <arch>.expert_count / expert_used_count, a router ffn_gate_inp
  // (F32, as converters and llama.cpp's quantizer keep it) and stacked
  // ffn_{gate,up,down}_exps instead of the dense FFN. qwen3moe's experts
  // have expert_ffn rows (<arch>.expert_feed_forward_length; 0 = not
  // written), Mixtral's the shape's ffn.
  int experts = 0, experts_used = 2, expert_ffn = 0;
  std::vector<std::pair<std::string, uint32_t>> kv_u32 = {};  // extra <arch>.KEY = u32
  std::vector<std::pair<std::string, bool>> kv_bool = {};     // extra <arch>.KEY = bool
  // What the runtime refuses: shared-expert tensors, a selection bias, a
  // fused ffn_gate_up_exps instead of gate and up, a missing ffn_gate_exps.
  bool shexp = false, probs_bias = false, fused_gate_up_exps = false, no_gate_exps = false;
  // gemma3 (docs/gemma3.md section 5): q/k norms, post_attention_norm and
  // post_ffw_norm, rope.freq_base 1e6 and (with a window) freq_base_swa 1e4
  // unless no_swa_base; `sliding_window` above is the window, `kv_u32`
  // may add sliding_window_pattern. layers > 0 overrides the shape's layer
  // count; tied = no output.weight.
  int layers = 0;
  bool tied = false, no_swa_base = false;
  bool pattern_array = false;  // sliding_window_pattern as an i32 array (refused)
  bool no_eps = false;         // no attention.layer_norm_rms_epsilon (gemma3 requires it)
};

inline constexpr int kDim = 256, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kFfn = 512,
              kVocab = 512;

// RandomShape: the model's sizes (defaults: the constants above).
struct RandomShape {
  int dim = kDim, layers = kLayers, heads = kHeads, kv_heads = kKvHeads, head_dim = kHeadDim,
      ffn = kFfn, context = 1024;
};

inline std::vector<float> Normal(size_t n, float std, std::mt19937* rng, float mean = 0) {
  std::normal_distribution<float> nd(mean, std);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(*rng);
  return v;
}

// WriteRandomExperts: block p's router and stacked experts (Variant's MoE
// fields), e = v.experts experts of inner size ef over dim d.
inline void WriteRandomExperts(const Variant& v, uint64_t d, uint64_t ef, bool f16,
                               const std::string& p, std::mt19937* rng, GgufWriter* w) {
  const uint64_t e = v.experts;
  const float ws = 1.0f / std::sqrt(float(d));
  w->Tensor(p + "ffn_gate_inp.weight", {d, e}, Normal(d * e, ws, rng), false);
  std::vector<float> gate = Normal(d * ef * e, ws, rng), up = Normal(d * ef * e, ws, rng);
  if (v.fused_gate_up_exps) {
    // Per expert [gate rows | up rows], as a fused converter would stack them.
    std::vector<float> gu;
    for (uint64_t i = 0; i < e; ++i) {
      gu.insert(gu.end(), gate.begin() + i * d * ef, gate.begin() + (i + 1) * d * ef);
      gu.insert(gu.end(), up.begin() + i * d * ef, up.begin() + (i + 1) * d * ef);
    }
    w->Tensor(p + "ffn_gate_up_exps.weight", {d, 2 * ef, e}, gu, f16);
  } else {
    if (!v.no_gate_exps) w->Tensor(p + "ffn_gate_exps.weight", {d, ef, e}, gate, f16);
    w->Tensor(p + "ffn_up_exps.weight", {d, ef, e}, up, f16);
  }
  w->Tensor(p + "ffn_down_exps.weight", {ef, d, e}, Normal(ef * d * e, 1.0f / std::sqrt(float(ef)), rng), f16);
  if (v.shexp) {
    w->Tensor(p + "ffn_gate_shexp.weight", {d, ef}, Normal(d * ef, ws, rng), f16);
    w->Tensor(p + "ffn_up_shexp.weight", {d, ef}, Normal(d * ef, ws, rng), f16);
    w->Tensor(p + "ffn_down_shexp.weight", {ef, d}, Normal(ef * d, ws, rng), f16);
  }
  if (v.probs_bias) w->Tensor(p + "exp_probs_b.bias", {e}, Normal(e, 0.1f, rng), false);
}

// WriteRandomModel: a seeded random model of `v` at `path` (F16 or F32).
inline void WriteRandomModel(const Variant& v, bool f16, const std::string& path,
                             const RandomShape& shape = {}) {
  const int kDim = shape.dim, kLayers = v.layers > 0 ? v.layers : shape.layers, kHeads = shape.heads,
            kKvHeads = shape.kv_heads, kHeadDim = shape.head_dim, kFfn = shape.ffn;
  std::mt19937 rng(1234);
  GgufWriter w;
  const std::string a = v.arch;
  w.KvStr("general.architecture", a);
  w.KvU32(a + ".context_length", shape.context);
  w.KvU32(a + ".embedding_length", kDim);
  w.KvU32(a + ".feed_forward_length", kFfn);
  w.KvU32(a + ".block_count", kLayers);
  w.KvU32(a + ".attention.head_count", kHeads);
  w.KvU32(a + ".attention.head_count_kv", kKvHeads);
  w.KvU32(a + ".attention.key_length", kHeadDim);
  w.KvU32(a + ".attention.value_length", kHeadDim);
  w.KvU32(a + ".rope.dimension_count", v.rope_dims > 0 ? v.rope_dims : kHeadDim);
  if (!v.no_eps) w.KvF32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.KvF32(a + ".rope.freq_base", a == "llama" ? 500000.0f : (a == "phi3" ? 10000.0f : 1000000.0f));
  if (v.sliding_window > 0) w.KvU32(a + ".attention.sliding_window", v.sliding_window);
  const bool gemma = a == "gemma3";
  if (gemma && v.sliding_window > 0 && !v.no_swa_base) w.KvF32(a + ".rope.freq_base_swa", 10000.0f);
  if (v.pattern_array) w.KvI32s(a + ".attention.sliding_window_pattern", std::vector<int32_t>(kLayers, 1));
  if (v.linear_factor > 0) {
    w.KvStr(a + ".rope.scaling.type", "linear");
    w.KvF32(a + ".rope.scaling.factor", v.linear_factor);
  }
  if (v.yarn_factor > 0) {
    w.KvStr(a + ".rope.scaling.type", "yarn");
    w.KvF32(a + ".rope.scaling.factor", v.yarn_factor);
    w.KvU32(a + ".rope.scaling.original_context_length", v.yarn_original);
  }
  if (v.attn_factor > 0) w.KvF32(a + ".rope.scaling.attn_factor", v.attn_factor);
  if (v.scale_linear > 0) w.KvF32(a + ".rope.scale_linear", v.scale_linear);
  for (const auto& [k, x] : v.kv_f32) w.KvF32(a + "." + k, x);
  for (const auto& [k, x] : v.kv_u32) w.KvU32(a + "." + k, x);
  for (const auto& [k, x] : v.kv_bool) w.KvBool(a + "." + k, x);
  if (v.experts > 0) {
    w.KvU32(a + ".expert_count", v.experts);
    w.KvU32(a + ".expert_used_count", v.experts_used);
    if (v.expert_ffn > 0) w.KvU32(a + ".expert_feed_forward_length", v.expert_ffn);
  }
  if (!v.scaling_type.empty()) w.KvStr(a + ".rope.scaling.type", v.scaling_type);
  ::ragkv::testing::AddTinyLlamaVocab(&w, kVocab);
  const uint64_t d = kDim, q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim, f = kFfn;
  const float ws = 1.0f / std::sqrt(float(kDim));
  // gemma3 scales embeddings by sqrt(dim): rows of std 0.25 give a residual
  // stream of ~4 per element (a tied classifier's logits span ~25).
  w.Tensor("token_embd.weight", {d, kVocab}, Normal(d * kVocab, gemma ? 0.25f : 1.0f, &rng), f16);
  w.Tensor("output_norm.weight", {d}, Normal(d, 0.1f, &rng, 1.0f), false);
  std::vector<float> out_w = Normal(d * kVocab, 3 * ws, &rng);
  if (!v.tied) w.Tensor("output.weight", {d, kVocab}, out_w, f16);
  if (v.rope_freqs) {
    std::vector<float> ff(kHeadDim / 2);
    for (int j = 0; j < kHeadDim / 2; ++j) ff[j] = j < 8 ? 1.0f : (j < 20 ? 1.0f + (j - 8) * 0.6f : 8.0f);
    w.Tensor("rope_freqs.weight", {uint64_t(kHeadDim / 2)}, ff, false);
  }
  if (v.longrope) {  // as llama.cpp's Phi-3 converter writes a 128k file
    std::vector<float> ff(kHeadDim / 2);
    for (int j = 0; j < kHeadDim / 2; ++j) ff[j] = 1.0f + 0.1f * j;
    w.Tensor("rope_factors_long.weight", {uint64_t(kHeadDim / 2)}, ff, false);
    w.Tensor("rope_factors_short.weight", {uint64_t(kHeadDim / 2)}, ff, false);
    w.KvF32(a + ".rope.scaling.attn_factor", 1.19f);
    w.KvU32(a + ".rope.scaling.original_context_length", 4096);
  }
  // Phi-3 stores [q | k | v] as one attn_qkv and [gate | up] as one ffn_up.
  const bool fused = a == "phi3" && !v.unfused;
  auto cat = [](std::vector<float> x, const std::vector<float>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.Tensor(p + "attn_norm.weight", {d}, Normal(d, 0.1f, &rng, 1.0f), false);
    std::vector<float> wq = Normal(d * q, ws, &rng), wk = Normal(d * kv, ws, &rng),
                       wv = Normal(d * kv, ws, &rng);
    if (fused) {
      w.Tensor(p + "attn_qkv.weight", {d, q + 2 * kv}, cat(cat(wq, wk), wv), f16);
    } else {
      w.Tensor(p + "attn_q.weight", {d, q}, wq, f16);
      w.Tensor(p + "attn_k.weight", {d, kv}, wk, f16);
      w.Tensor(p + "attn_v.weight", {d, kv}, wv, f16);
    }
    if (a == "qwen2") {
      w.Tensor(p + "attn_q.bias", {q}, Normal(q, 0.2f, &rng), false);
      w.Tensor(p + "attn_k.bias", {kv}, Normal(kv, 0.2f, &rng), false);
      w.Tensor(p + "attn_v.bias", {kv}, Normal(kv, 0.2f, &rng), false);
    }
    if (a == "qwen3" || a == "qwen3moe" || gemma) {
      w.Tensor(p + "attn_q_norm.weight", {uint64_t(kHeadDim)}, Normal(kHeadDim, 0.1f, &rng, 1.0f), false);
      w.Tensor(p + "attn_k_norm.weight", {uint64_t(kHeadDim)}, Normal(kHeadDim, 0.1f, &rng, 1.0f), false);
    }
    w.Tensor(p + "attn_output.weight", {q, d}, Normal(q * d, ws, &rng), f16);
    if (gemma) w.Tensor(p + "post_attention_norm.weight", {d}, Normal(d, 0.1f, &rng, 1.0f), false);
    w.Tensor(p + "ffn_norm.weight", {d}, Normal(d, 0.1f, &rng, 1.0f), false);
    if (v.experts > 0) {
      WriteRandomExperts(v, d, v.expert_ffn > 0 ? v.expert_ffn : f, f16, p, &rng, &w);
      continue;
    }
    std::vector<float> gate = Normal(d * f, ws, &rng), up = Normal(d * f, ws, &rng);
    if (fused) {
      w.Tensor(p + "ffn_up.weight", {d, 2 * f}, cat(gate, up), f16);
    } else {
      w.Tensor(p + "ffn_gate.weight", {d, f}, gate, f16);
      w.Tensor(p + "ffn_up.weight", {d, f}, up, f16);
    }
    w.Tensor(p + "ffn_down.weight", {f, d}, Normal(f * d, 1.0f / std::sqrt(float(kFfn)), &rng), f16);
    if (gemma) w.Tensor(p + "post_ffw_norm.weight", {d}, Normal(d, 0.1f, &rng, 1.0f), false);
  }
  w.Write(path);
}

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_SUPPORT_RANDOM_MODEL_H_
