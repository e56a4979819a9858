// config.h: ModelConfig, the shape and numeric conventions of a Llama-family
// decoder (Llama / Llama-2, Mistral, Qwen2, llama2.c, synthetic).
//
// A plain value type; thread-compatible. Every loader fills one and calls
// Validate(), so a Model never sees an inconsistent shape.
#ifndef RAGKV_MODEL_CONFIG_H_
#define RAGKV_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/rope.h"
#include "kernels/tensor.h"

namespace ragkv::model {

// kMaxExperts: the most experts a block may have (llama.cpp's
// LLAMA_MAX_EXPERTS in the pinned release).
inline constexpr int kMaxExperts = 1024;

struct ModelConfig {
  // Architecture tag: "llama" (also llama2.c and synthetic), "mistral",
  // "qwen2", "qwen3", "phi3" (GGUF; its fused tensors are split at load),
  // "qwen3moe" (GGUF; qwen3's attention with a mixture-of-experts FFN),
  // "gemma3" (GGUF; the Gemma fields below). It is part of the fingerprint.
  std::string arch = "llama";
  int dim = 0;          // hidden size
  int hidden_dim = 0;   // FFN inner size (SwiGLU); of each expert when n_experts > 0
  int n_layers = 0;
  int n_heads = 0;      // query heads
  int n_kv_heads = 0;   // key/value heads; divides n_heads
  int head_dim = 0;     // per-head size; 0 in input means dim / n_heads
  int vocab_size = 0;
  int max_seq_len = 0;  // context length the runtime accepts
  float rope_theta = 10000.0f;
  // Pairing convention of RoPE *as the stored q/k weights expect it*:
  // kInterleaved for llama2.c and GGUF, kHalfSplit for Hugging Face
  // checkpoints (whose q/k rows are permuted). The runtime applies RoPE in
  // this layout, so exported keys are bit-for-bit the layout an engine
  // running that checkpoint caches (see docs/model.md).
  kernels::RopeLayout rope_layout = kernels::RopeLayout::kInterleaved;
  // RoPE scaling: "none", "linear" (rope_freq_scale = 1/factor), "llama3"
  // (per-pair rope_freq_factors, as GGUF rope_freqs.weight carries them and
  // as computed from an HF rope_scaling block) or "yarn" (per-pair factors
  // and rope_mscale, computed from the YaRN parameters; docs/model.md).
  // Loaders refuse every other kind by name ("longrope", "dynamic", ...).
  std::string rope_scaling = "none";
  float rope_freq_scale = 1.0f;
  std::vector<float> rope_freq_factors;  // [head_dim/2] or empty
  // Magnitude RoPE gives q and k (YaRN's attention factor times GGUF
  // rope.scaling.attn_factor); 1 = none. kernels::RopeParams::mscale.
  float rope_mscale = 1.0f;
  // Qwen3: RMSNorm over each head of q and k (weights [head_dim]) before RoPE.
  bool qk_norm = false;
  float norm_eps = 1e-5f;
  bool shared_classifier = false;  // lm head == token embedding matrix
  bool qkv_bias = false;           // q/k/v projections carry a bias (Qwen2)
  // Mixture of experts (docs/model.md "Mixture of experts"): when
  // n_experts > 0 every block's FFN is n_experts SwiGLU experts of inner
  // size hidden_dim; a router picks n_experts_used of them per token
  // (softmax over all experts, top-k, the k weights renormalised to sum 1).
  // 0 = a dense FFN. qwen3moe requires n_experts > 0.
  int n_experts = 0;
  int n_experts_used = 0;
  // Gemma 3 (arch "gemma3", docs/gemma3.md). sliding_window > 0: layers
  // with IsSwaLayer(l) attend to the last sliding_window keys only (a query
  // at p sees p - sliding_window + 1 .. p) and rotate with rope_theta_swa,
  // unscaled; the others (global) with rope_theta and the file's scaling.
  // swa_pattern p: layer l is SWA iff p == 0 || l % p < p - 1 (llama.cpp's
  // set_swa_pattern). 0 window = every layer global.
  int sliding_window = 0;
  int swa_pattern = 6;
  float rope_theta_swa = 10000.0f;
  float attn_scale = 0.0f;     // attention logit scale; 0 = 1/sqrt(head_dim)
  float embed_scale = 1.0f;    // token embeddings times this (gemma3: sqrt(dim))
  float final_softcap = 0.0f;  // > 0: logits = c * tanh(logits / c)
  enum class FfnAct { kSwiGlu = 0, kGeGluTanhGgml = 1 };  // kernels::SwiGlu / GeGluGgml
  FfnAct ffn_act = FfnAct::kSwiGlu;
  // RMSNorm of the attention output and of the FFN output before each is
  // added to the residual (LayerWeights::post_attn_norm / post_ffn_norm).
  bool post_norms = false;
  // dtype in which KV is stored/exported for this deployment; part of the
  // fingerprint (docs/design.md §3). Compute is always f32.
  kernels::DType kv_dtype = kernels::DType::kF16;

  int q_dim() const { return n_heads * head_dim; }
  // Rope: the RoPE parameters of this model's q/k (points into
  // rope_freq_factors: valid while this config lives).
  kernels::RopeParams Rope() const;
  // IsSwaLayer: layer l attends through the sliding window (see above).
  bool IsSwaLayer(int l) const {
    return sliding_window > 0 && (swa_pattern == 0 || l % swa_pattern < swa_pattern - 1);
  }
  // LayerRope: the RoPE of layer l: Rope() for a global layer; for a SWA
  // layer base rope_theta_swa with no scaling (freq_scale 1, no factors,
  // mscale 1), as llama.cpp's get_rope_freq_base / _scale.
  kernels::RopeParams LayerRope(int l) const;
  // Window: the attention window of layer l (0 = none).
  int Window(int l) const { return IsSwaLayer(l) ? sliding_window : 0; }
  int kv_dim() const { return n_kv_heads * head_dim; }

  // Validate: fills head_dim when 0, then checks every invariant (positive
  // sizes, n_kv_heads | n_heads, even head_dim, known arch, finite positive
  // theta/eps, ...). InvalidArgument naming the offending field otherwise.
  absl::Status Validate();
  // DebugString: one line, e.g. "llama dim=64 hidden=172 layers=5 ...".
  std::string DebugString() const;
};

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_CONFIG_H_
