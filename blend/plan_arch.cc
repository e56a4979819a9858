#include "blend/plan_arch.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_format.h"

namespace ragkv::blend {
namespace {

ModelArch Dense(const char* name, const char* source, int layers, int dim, int heads,
                int kv_heads, int head_dim, int ffn, int vocab) {
  ModelArch a;
  a.name = name;
  a.source = source;
  a.layers = layers;
  a.dim = dim;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.ffn = ffn;
  a.vocab = vocab;
  return a;
}

ModelArch Moe(ModelArch a, int experts, int active, int expert_ffn) {
  a.experts = experts;
  a.experts_active = active;
  a.expert_ffn = expert_ffn;
  return a;
}

ModelArch DeepSeekV3() {
  ModelArch a = Moe(Dense("deepseek-v3", "huggingface.co/deepseek-ai/DeepSeek-V3 config.json", 61,
                          7168, 128, 128, 192, 18432, 129280),
                    256, 8, 2048);
  a.shared_experts = 1;
  a.shared_expert_ffn = 2048;
  a.first_dense_layers = 3;
  a.q_lora_rank = 1536;
  a.kv_lora_rank = 512;
  a.qk_nope_dim = 128;
  a.qk_rope_dim = 64;
  a.v_head_dim = 128;
  a.weight_bytes = 1;  // the published checkpoint is FP8 (e4m3, 128x128 block scales)
  a.expert_weight_bytes = 1;
  a.precision = Precision::kFp8;
  return a;
}

ModelArch GptOss120b() {
  ModelArch a = Moe(Dense("gpt-oss-120b", "huggingface.co/openai/gpt-oss-120b config.json", 36,
                          2880, 64, 8, 64, 2880, 201088),
                    128, 4, 2880);
  a.sliding_window = 128;
  a.global_every = 2;  // layer_types alternate sliding, full
  a.expert_weight_bytes = 4.25 / 8;  // MXFP4 experts: 4-bit values + one 8-bit scale per 32
  return a;
}

ModelArch Gemma3_27b() {
  ModelArch a =
      Dense("gemma-3-27b", "huggingface.co/google/gemma-3-27b-it config.json (text_config)", 62,
            5376, 32, 16, 128, 21504, 262208);
  a.sliding_window = 1024;
  a.global_every = 6;  // sliding_window_pattern 6: five local layers, then one global
  return a;
}

ModelArch Qwen3Next() {
  ModelArch a = Moe(Dense("qwen3-next-80b-a3b",
                          "huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct config.json", 48, 2048,
                          16, 2, 256, 5120, 151936),
                    512, 10, 512);
  a.shared_experts = 1;
  a.shared_expert_ffn = 512;
  a.attn_output_gate = true;
  a.full_attention_every = 4;
  a.linear_k_heads = 16;
  a.linear_v_heads = 32;
  a.linear_k_dim = 128;
  a.linear_v_dim = 128;
  return a;
}

const std::map<std::string, ModelArch>& Presets() {
  static const auto* presets = new std::map<std::string, ModelArch>{
      {"llama-3.1-8b", Dense("llama-3.1-8b", "huggingface.co/meta-llama/Llama-3.1-8B config.json",
                             32, 4096, 32, 8, 128, 14336, 128256)},
      {"llama-3.1-70b",
       Dense("llama-3.1-70b", "huggingface.co/meta-llama/Llama-3.1-70B config.json", 80, 8192, 64,
             8, 128, 28672, 128256)},
      {"llama-2-70b", Dense("llama-2-70b", "huggingface.co/meta-llama/Llama-2-70b-hf config.json",
                            80, 8192, 64, 8, 128, 28672, 32000)},
      {"llama-3.1-405b",
       Dense("llama-3.1-405b", "huggingface.co/meta-llama/Llama-3.1-405B config.json", 126, 16384,
             128, 8, 128, 53248, 128256)},
      {"qwen3-8b", Dense("qwen3-8b", "huggingface.co/Qwen/Qwen3-8B config.json", 36, 4096, 32, 8,
                         128, 12288, 151936)},
      {"qwen3-30b-a3b", Moe(Dense("qwen3-30b-a3b", "huggingface.co/Qwen/Qwen3-30B-A3B config.json",
                                  48, 2048, 32, 4, 128, 6144, 151936),
                            128, 8, 768)},
      {"qwen3-235b-a22b",
       Moe(Dense("qwen3-235b-a22b", "huggingface.co/Qwen/Qwen3-235B-A22B config.json", 94, 4096, 64,
                 4, 128, 12288, 151936),
           128, 8, 1536)},
      {"mixtral-8x7b",
       Moe(Dense("mixtral-8x7b", "huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json", 32, 4096,
                 32, 8, 128, 14336, 32000),
           8, 2, 14336)},
      {"gpt-oss-120b", GptOss120b()},
      {"deepseek-v3", DeepSeekV3()},
      {"gemma-3-27b", Gemma3_27b()},
      {"qwen3-next-80b-a3b", Qwen3Next()},
  };
  return *presets;
}

double AttentionWeights(const ModelArch& a, int layer) {
  const double d = a.dim;
  if (LayerAttention(a, layer) == AttentionKind::kLinear) {
    const double k = static_cast<double>(a.linear_k_heads) * a.linear_k_dim;
    const double v = static_cast<double>(a.linear_v_heads) * a.linear_v_dim;
    return d * (2 * k + 2 * v + 2.0 * a.linear_v_heads) + v * d;
  }
  if (IsMla(a)) {
    const double h = a.heads, qk = a.qk_nope_dim + a.qk_rope_dim;
    const double q = a.q_lora_rank > 0 ? d * a.q_lora_rank + a.q_lora_rank * h * qk : d * h * qk;
    return q + d * (a.kv_lora_rank + a.qk_rope_dim) +
           a.kv_lora_rank * h * (a.qk_nope_dim + a.v_head_dim) + h * a.v_head_dim * d;
  }
  const double q = static_cast<double>(a.heads) * a.head_dim;
  const double kv = static_cast<double>(a.kv_heads) * a.head_dim;
  return d * q * (a.attn_output_gate ? 2 : 1) + 2 * d * kv + q * d;
}

}  // namespace

absl::StatusOr<ModelArch> ArchPreset(const std::string& name) {
  auto it = Presets().find(name);
  if (it != Presets().end()) return it->second;
  absl::StatusOr<ModelShape> s = ModelPreset(name);
  if (s.ok()) return ArchOfShape(*s);
  return absl::NotFoundError(absl::StrFormat("unknown model preset '%s'", name));
}

std::vector<std::string> ArchPresetNames() {
  std::vector<std::string> out;
  for (const auto& [k, v] : Presets()) out.push_back(k);
  return out;
}

ModelArch ArchOfShape(const ModelShape& s) {
  ModelArch a = Dense(s.name.c_str(), "blend::ModelPreset / checkpoint config", s.layers, s.dim,
                      s.heads, s.kv_heads, s.head_dim, s.ffn, s.vocab);
  a.weight_bytes = s.weight_bytes_per_elem;
  a.expert_weight_bytes = s.weight_bytes_per_elem;
  a.kv_bytes = s.kv_bytes_per_elem;
  a.act_bytes = s.weight_bytes_per_elem;
  return a;
}

ModelShape ShapeOfArch(const ModelArch& a) {
  ModelShape s;
  s.name = a.name;
  s.layers = a.layers;
  s.dim = a.dim;
  s.heads = a.heads;
  s.kv_heads = a.kv_heads;
  s.head_dim = IsMla(a) ? a.qk_nope_dim + a.qk_rope_dim : a.head_dim;
  s.ffn = a.experts > 0 ? a.experts_active * a.expert_ffn + a.shared_experts * a.shared_expert_ffn
                        : a.ffn;
  s.vocab = a.vocab;
  s.weight_bytes_per_elem = static_cast<int>(std::max(1.0, a.weight_bytes));
  s.kv_bytes_per_elem = static_cast<int>(std::max(1.0, a.kv_bytes));
  if (IsMla(a)) s.kv_elems_per_token = a.kv_lora_rank + a.qk_rope_dim;
  return s;
}

AttentionKind LayerAttention(const ModelArch& a, int layer) {
  if (a.full_attention_every > 0) {
    return (layer + 1) % a.full_attention_every == 0 ? AttentionKind::kGlobal
                                                     : AttentionKind::kLinear;
  }
  if (a.sliding_window <= 0) return AttentionKind::kGlobal;
  if (a.global_every > 0 && (layer + 1) % a.global_every == 0) return AttentionKind::kGlobal;
  return AttentionKind::kSliding;
}

bool IsMla(const ModelArch& a) { return a.kv_lora_rank > 0; }

bool IsMoeLayer(const ModelArch& a, int layer) {
  return a.experts > 0 && layer >= a.first_dense_layers;
}

int CountLayers(const ModelArch& a, AttentionKind kind) {
  int n = 0;
  for (int l = 0; l < a.layers; ++l) n += LayerAttention(a, l) == kind ? 1 : 0;
  return n;
}

double KvElemsPerToken(const ModelArch& a, int layer) {
  if (LayerAttention(a, layer) == AttentionKind::kLinear) return 0;
  if (IsMla(a)) return a.kv_lora_rank + a.qk_rope_dim;
  return 2.0 * a.kv_heads * a.head_dim;
}

double KvBytes(const ModelArch& a, int64_t tokens) {
  double total = 0;
  for (int l = 0; l < a.layers; ++l) {
    int64_t kept = tokens;
    if (LayerAttention(a, l) == AttentionKind::kSliding) {
      kept = std::min<int64_t>(tokens, a.sliding_window);
    }
    total += KvElemsPerToken(a, l) * static_cast<double>(kept) * a.kv_bytes;
  }
  return total;
}

double RecurrentStateBytes(const ModelArch& a) {
  const double per_layer =
      static_cast<double>(a.linear_v_heads) * a.linear_k_dim * a.linear_v_dim * 4.0;
  return per_layer * CountLayers(a, AttentionKind::kLinear);
}

double WeightBytes(const ModelArch& a) {
  const double d = a.dim;
  double total = 2.0 * d * a.vocab * a.weight_bytes;  // embeddings + classifier (untied)
  for (int l = 0; l < a.layers; ++l) {
    total += AttentionWeights(a, l) * a.weight_bytes;
    if (!IsMoeLayer(a, l)) {
      total += 3.0 * d * a.ffn * a.weight_bytes;
      continue;
    }
    total += 3.0 * d * a.expert_ffn * a.experts * a.expert_weight_bytes / a.expert_parallel;
    total += 3.0 * d * a.shared_expert_ffn * a.shared_experts * a.weight_bytes;
    total += d * a.experts * a.weight_bytes;  // router
  }
  return total;
}

absl::Status CheckChunkReusable(const ModelArch& a) {
  const int linear = CountLayers(a, AttentionKind::kLinear);
  if (linear == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: blending and KV reuse refused: %d of %d layers are linear attention (recurrent "
      "state), whose state after a chunk depends on every token before it, so it cannot be "
      "precomputed per chunk and reused at another position",
      a.name, linear, a.layers));
}

}  // namespace ragkv::blend
