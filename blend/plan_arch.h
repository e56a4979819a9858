// plan_arch.h: model architectures for the planner (`ragkv plan`).
//
// ModelArch describes what drives cost in a decoder-only model beyond a dense
// GQA shape (blend/cost_model.h ModelShape): mixture-of-experts FFNs (routed,
// shared, leading dense layers), multi-head latent attention (MLA), a
// sliding-window / global layer pattern, and linear-attention (recurrent)
// layers. Presets come from the models' published config.json files; the
// numbers and their sources are listed in docs/planner.md. Pure values;
// thread-compatible.
#ifndef RAGKV_BLEND_PLAN_ARCH_H_
#define RAGKV_BLEND_PLAN_ARCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "blend/cost_model.h"

namespace ragkv::blend {

// Precision of the GEMMs (which peak of HardwareSpec applies).
enum class Precision { kBf16, kFp8 };

// AttentionKind of one layer.
enum class AttentionKind { kGlobal, kSliding, kLinear };

// ParallelKind: how one model replica is split over devices
// (blend/plan_parallel.h): tensor parallel (every layer's heads and FFN
// width split, two all-reduces per layer) or expert parallel (attention and
// dense FFNs tensor-parallel, routed experts spread over the devices with an
// all-to-all dispatch and combine per MoE layer).
enum class ParallelKind { kNone, kTensor, kExpert };

struct ModelArch {
  std::string name;
  std::string source;  // the config.json it was read from
  int layers = 0;
  int dim = 0;       // hidden_size
  int heads = 0;     // query heads
  int kv_heads = 0;  // GQA key/value heads (unused by MLA layers)
  int head_dim = 0;
  int ffn = 0;       // dense MLP hidden size (SwiGLU: gate, up, down)
  int vocab = 0;
  bool attn_output_gate = false;  // q projection doubled (Qwen3-Next gated attention)

  // Mixture of experts (experts == 0: dense). Layers [0, first_dense_layers)
  // use the dense MLP of size `ffn`; the others route each token to
  // `experts_active` of `experts` experts of size `expert_ffn`, plus
  // `shared_experts` always-on experts of size `shared_expert_ffn`.
  int experts = 0;
  int experts_active = 0;
  int expert_ffn = 0;
  int shared_experts = 0;
  int shared_expert_ffn = 0;
  int first_dense_layers = 0;

  // Multi-head latent attention (kv_lora_rank > 0): q via a q_lora_rank
  // bottleneck (0: direct), the cache holds kv_lora_rank + qk_rope_dim
  // elements per token per layer.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_dim = 0;
  int qk_rope_dim = 0;
  int v_head_dim = 0;

  // Sliding window: layer i is global iff global_every > 0 and
  // (i + 1) % global_every == 0, else sliding with `sliding_window` keys
  // (sliding_window == 0: every attention layer is global).
  int sliding_window = 0;
  int global_every = 0;

  // Linear attention (Gated DeltaNet): with full_attention_every > 0, layer
  // i is full attention iff (i + 1) % full_attention_every == 0, else linear
  // with the recurrent state below.
  int full_attention_every = 0;
  int linear_k_heads = 0;
  int linear_v_heads = 0;
  int linear_k_dim = 0;
  int linear_v_dim = 0;

  double weight_bytes = 2;         // bytes per non-expert weight
  double expert_weight_bytes = 2;  // bytes per expert weight (MXFP4: 4.25 / 8)
  double kv_bytes = 2;             // bytes per KV element in HBM and in the store
  double act_bytes = 2;            // bytes per activation element
  Precision precision = Precision::kBf16;

  // Deployment (set by ShardArch, blend/plan_parallel.h, on the per-device
  // copy): the devices one replica spans and how; under expert parallelism
  // each device holds experts / expert_parallel routed experts and computes
  // the token-expert pairs routed to them.
  int parallel_devices = 1;
  ParallelKind parallel = ParallelKind::kNone;
  int expert_parallel = 1;
};

// ArchPreset: a preset of this file (llama-3.1-8b, llama-3.1-70b, qwen3-8b,
// qwen3-30b-a3b, qwen3-235b-a22b, mixtral-8x7b, gpt-oss-120b, deepseek-v3,
// gemma-3-27b, qwen3-next-80b-a3b) or one of blend::ModelPreset's, converted
// by ArchOfShape. NotFound otherwise.
absl::StatusOr<ModelArch> ArchPreset(const std::string& name);
// ArchPresetNames: the presets of this file only (not ModelPresetNames()).
std::vector<std::string> ArchPresetNames();

// ArchOfShape: a dense GQA ModelShape as an architecture (all layers global).
ModelArch ArchOfShape(const ModelShape& s);
// ShapeOfArch: the dense-equivalent ModelShape the legacy CostModel rows use:
// ffn = active routed + shared expert width, KV elements per token as the
// architecture's (MLA latent); sliding windows and linear layers ignored.
ModelShape ShapeOfArch(const ModelArch& a);

AttentionKind LayerAttention(const ModelArch& a, int layer);
bool IsMla(const ModelArch& a);
bool IsMoeLayer(const ModelArch& a, int layer);
int CountLayers(const ModelArch& a, AttentionKind kind);

// KvElemsPerToken: KV elements one token keeps in one attention layer (0 for
// linear layers: they keep a fixed-size state instead).
double KvElemsPerToken(const ModelArch& a, int layer);
// KvBytes: bytes of the KV of `tokens` tokens over all layers (sliding layers
// keep at most `sliding_window` tokens).
double KvBytes(const ModelArch& a, int64_t tokens);
// RecurrentStateBytes: fp32 state of all linear-attention layers of one sequence.
double RecurrentStateBytes(const ModelArch& a);
// WeightBytes: all weights (every expert, embeddings and classifier).
double WeightBytes(const ModelArch& a);

// CheckChunkReusable: OK when every layer's per-token KV can be precomputed
// per chunk and reused (CacheBlend, full reuse). FailedPrecondition naming
// the model when it has linear-attention layers: their recurrent state after
// a chunk depends on everything before it, so a chunk's state is not
// reusable at another position.
absl::Status CheckChunkReusable(const ModelArch& a);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLAN_ARCH_H_
