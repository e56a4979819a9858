// gguf_gemma3.h: the metadata of a GGUF gemma3 file (docs/gemma3.md
// section 1), read as the pinned llama.cpp reads it
// (llama_model_gemma3::load_arch_hparams), and what ragkv refuses by name
// (section 6). Private to model/.
#ifndef RAGKV_MODEL_INTERNAL_GGUF_GEMMA3_H_
#define RAGKV_MODEL_INTERNAL_GGUF_GEMMA3_H_

#include <string>

#include "absl/status/status.h"
#include "model/config.h"
#include "model/internal/gguf_file.h"

namespace ragkv::model::internal {

// ReadGgufGemma3: after the common keys and ReadGgufScaling filled c (dim,
// heads, head_dim, rope_theta, rope_scaling, rope_mscale), sets the gemma3
// fields: sliding_window (gemma3.attention.sliding_window; absent or 0 =
// every layer global), swa_pattern (attention.sliding_window_pattern,
// default 6), rope_theta_swa (rope.freq_base_swa, default 10000), the
// attention scale (1/sqrt(head_dim); 1/sqrt(dim / heads) when block_count
// is 62, llama.cpp's 27B rule), embed_scale sqrt(dim), final_softcap
// (final_logit_softcapping, default 0), GeGLU, post norms; requires
// attention.layer_norm_rms_epsilon (InvalidArgument naming it).
// Unimplemented naming the key or tensor for: an array pattern, per-SWA
// head sizes or rotary dims differing from the full ones, RoPE scaling other
// than none / linear (YaRN, ...), rope.scaling.attn_factor != 1,
// attn_logit_softcapping != 0, attention.causal false, q/k/v biases.
absl::Status ReadGgufGemma3(const Gguf& g, const std::string& path, ModelConfig* c);

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_GGUF_GEMMA3_H_
