#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace ragkv::model {
namespace {
absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError("model config: " + what);
}
}  // namespace

absl::Status ModelConfig::Validate() {
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3" &&
      arch != "phi3" && arch != "qwen3moe" && arch != "gemma3") {
    return absl::UnimplementedError("model config: unsupported architecture '" + arch +
                                    "' (supported: llama, mistral, qwen2, qwen3, phi3, qwen3moe, "
                                    "gemma3)");
  }
  if (sliding_window < 0 || swa_pattern < 0) {
    return Bad(absl::StrFormat("sliding_window (%d) and swa_pattern (%d) must be >= 0",
                               sliding_window, swa_pattern));
  }
  if (!(std::isfinite(rope_theta_swa) && rope_theta_swa > 0) || !std::isfinite(attn_scale) ||
      attn_scale < 0 || !(std::isfinite(embed_scale) && embed_scale > 0) ||
      !std::isfinite(final_softcap) || final_softcap < 0) {
    return Bad(absl::StrFormat("rope_theta_swa %g, attn_scale %g, embed_scale %g, final_softcap %g",
                               rope_theta_swa, attn_scale, embed_scale, final_softcap));
  }
  if (dim <= 0) return Bad(absl::StrFormat("dim must be > 0, got %d", dim));
  if (hidden_dim <= 0) return Bad(absl::StrFormat("hidden_dim must be > 0, got %d", hidden_dim));
  if (n_layers <= 0) return Bad(absl::StrFormat("n_layers must be > 0, got %d", n_layers));
  if (n_heads <= 0) return Bad(absl::StrFormat("n_heads must be > 0, got %d", n_heads));
  if (n_kv_heads <= 0 || n_kv_heads > n_heads || n_heads % n_kv_heads != 0) {
    return Bad(absl::StrFormat("n_kv_heads (%d) must divide n_heads (%d)", n_kv_heads, n_heads));
  }
  if (head_dim == 0) {
    if (dim % n_heads != 0) {
      return Bad(absl::StrFormat("dim (%d) is not a multiple of n_heads (%d)", dim, n_heads));
    }
    head_dim = dim / n_heads;
  }
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return Bad(absl::StrFormat("head_dim must be positive and even, got %d", head_dim));
  }
  if (n_experts < 0 || n_experts > kMaxExperts) {
    return Bad(absl::StrFormat("n_experts must be in [0, %d], got %d", kMaxExperts, n_experts));
  }
  if (n_experts > 0 ? (n_experts_used < 1 || n_experts_used > n_experts) : n_experts_used != 0) {
    return Bad(absl::StrFormat("n_experts_used (%d) must be in [1, n_experts (%d)]",
                               n_experts_used, n_experts));
  }
  if (arch == "qwen3moe" && n_experts == 0) return Bad("qwen3moe needs n_experts > 0");
  if (vocab_size <= 0) return Bad(absl::StrFormat("vocab_size must be > 0, got %d", vocab_size));
  if (max_seq_len <= 0) return Bad(absl::StrFormat("max_seq_len must be > 0, got %d", max_seq_len));
  if (!(std::isfinite(rope_theta) && rope_theta > 0)) {
    return Bad(absl::StrFormat("rope_theta must be finite and > 0, got %g", rope_theta));
  }
  if (!(std::isfinite(norm_eps) && norm_eps > 0)) {
    return Bad(absl::StrFormat("norm_eps must be finite and > 0, got %g", norm_eps));
  }
  if (rope_scaling != "none" && rope_scaling != "linear" && rope_scaling != "llama3" &&
      rope_scaling != "yarn") {
    return absl::UnimplementedError("model config: rope scaling '" + rope_scaling +
                                    "' is not supported (none, linear, llama3, yarn are)");
  }
  if (!(std::isfinite(rope_mscale) && rope_mscale > 0)) {
    return Bad(absl::StrFormat("rope_mscale must be finite and > 0, got %g", rope_mscale));
  }
  if (!(std::isfinite(rope_freq_scale) && rope_freq_scale > 0)) {
    return Bad(absl::StrFormat("rope_freq_scale must be finite and > 0, got %g", rope_freq_scale));
  }
  if (!rope_freq_factors.empty()) {
    if (rope_freq_factors.size() != static_cast<size_t>(head_dim / 2)) {
      return Bad(absl::StrFormat("rope_freq_factors has %d entries, head_dim/2 is %d",
                                 rope_freq_factors.size(), head_dim / 2));
    }
    for (float f : rope_freq_factors) {
      if (!(std::isfinite(f) && f > 0)) return Bad(absl::StrFormat("rope_freq_factors entry %g", f));
    }
  }
  // Guard the products used for allocation against overflow.
  const int64_t kMax = int64_t{1} << 40;
  if (int64_t{vocab_size} * dim > kMax ||
      int64_t{hidden_dim} * dim * std::max(n_experts, 1) > kMax ||
      int64_t{q_dim()} * dim > kMax) {
    return Bad("dimensions are implausibly large");
  }
  if (kv_dtype != kernels::DType::kF32 && kv_dtype != kernels::DType::kF16 &&
      kv_dtype != kernels::DType::kBF16) {
    return Bad("kv_dtype must be f32, f16 or bf16");
  }
  return absl::OkStatus();
}

kernels::RopeParams ModelConfig::Rope() const {
  kernels::RopeParams p;
  p.head_dim = head_dim;
  p.theta = rope_theta;
  p.layout = rope_layout;
  p.freq_scale = rope_freq_scale;
  p.mscale = rope_mscale;
  p.freq_factors = rope_freq_factors.empty() ? nullptr : rope_freq_factors.data();
  return p;
}

kernels::RopeParams ModelConfig::LayerRope(int l) const {
  kernels::RopeParams p = Rope();
  if (IsSwaLayer(l)) {
    p.theta = rope_theta_swa;
    p.freq_scale = 1.0f;
    p.mscale = 1.0f;
    p.freq_factors = nullptr;
  }
  return p;
}

std::string ModelConfig::DebugString() const {
  return absl::StrFormat(
      "%s dim=%d hidden=%d layers=%d heads=%d kv_heads=%d head_dim=%d vocab=%d ctx=%d "
      "theta=%g rope=%s eps=%g shared_cls=%d qkv_bias=%d%s",
      arch, dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size, max_seq_len,
      rope_theta, rope_layout == kernels::RopeLayout::kInterleaved ? "interleaved" : "half_split",
      norm_eps, shared_classifier ? 1 : 0, qkv_bias ? 1 : 0,
      n_experts > 0 ? absl::StrFormat(" experts=%d/%d", n_experts_used, n_experts) : "") +
         (arch == "gemma3"
              ? absl::StrFormat(" window=%d pattern=%d theta_swa=%g attn_scale=%g%s embed_scale=%g "
                                "softcap=%g",
                                sliding_window, swa_pattern, rope_theta_swa, attn_scale,
                                n_layers == 62 ? "(62 layers: 1/sqrt(dim/heads))" : "",
                                embed_scale, final_softcap)
              : "");
}

}  // namespace ragkv::model
