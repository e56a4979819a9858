#include "model/internal/gguf_gemma3.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ragkv::model::internal {
namespace {

absl::Status Refuse(const std::string& path, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(path, ": gemma3: ", what, " is not supported"));
}

}  // namespace

absl::Status ReadGgufGemma3(const Gguf& g, const std::string& path, ModelConfig* c) {
  const std::string a = "gemma3.";
  if (!g.kv.count(a + "attention.layer_norm_rms_epsilon")) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": missing key ", a, "attention.layer_norm_rms_epsilon (required for gemma3)"));
  }
  const int hd = c->head_dim ? c->head_dim : (c->n_heads > 0 ? c->dim / c->n_heads : 0);
  // Per-SWA-layer sizes: llama.cpp's gemma3 graph uses layer 0's for every
  // layer, so a different value would not be computed right by either.
  for (const char* key : {"attention.key_length_swa", "attention.value_length_swa",
                          "rope.dimension_count_swa"}) {
    if (g.kv.count(a + key) && GetNumberOr(g, a + key, hd) != hd) {
      return Refuse(path, absl::StrCat(a, key, " = ", GetNumberOr(g, a + key, 0),
                                       " (differs from the full layers' ", hd, ")"));
    }
  }
  if (c->rope_scaling != "none" && c->rope_scaling != "linear") {
    return Refuse(path, absl::StrCat("RoPE scaling '", c->rope_scaling,
                                     "' (none and linear, on the global layers, are)"));
  }
  if (c->rope_mscale != 1.0f) {
    return Refuse(path, absl::StrCat(a, "rope.scaling.attn_factor = ", c->rope_mscale));
  }
  if (GetNumberOr(g, a + "attn_logit_softcapping", 0) != 0) {
    return Refuse(path, absl::StrCat(a, "attn_logit_softcapping (attention softcapping, gemma2's)"));
  }
  if (g.kv.count(a + "attention.causal") && GetNumberOr(g, a + "attention.causal", 1) == 0) {
    return Refuse(path, absl::StrCat(a, "attention.causal = false (non-causal attention)"));
  }
  for (const char* t : {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"}) {
    if (g.tensors.count(t)) return Refuse(path, absl::StrCat("tensor ", t, " (q/k/v biases)"));
  }
  const double window = GetNumberOr(g, a + "attention.sliding_window", 0);
  if (!(window >= 0) || window > (1 << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", a, "attention.sliding_window ", window));
  }
  c->sliding_window = static_cast<int>(window);
  if (c->sliding_window > 0) {
    auto it = g.kv.find(a + "attention.sliding_window_pattern");
    if (it != g.kv.end() && !it->second.is_number()) {
      return Refuse(path, absl::StrCat(a, "attention.sliding_window_pattern as an array (per-layer "
                                          "flags the pinned llama.cpp ignores for gemma3)"));
    }
    const double p = GetNumberOr(g, a + "attention.sliding_window_pattern", 6);
    if (!(p >= 0) || p > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", a, "attention.sliding_window_pattern ", p));
    }
    c->swa_pattern = static_cast<int>(p);
    c->rope_theta_swa = static_cast<float>(GetNumberOr(g, a + "rope.freq_base_swa", 10000.0));
  }
  // llama.cpp: n_embd / n_head(0) is an integer division.
  c->attn_scale = c->n_layers == 62 ? 1.0f / std::sqrt(static_cast<float>(c->dim / c->n_heads))
                                    : 1.0f / std::sqrt(static_cast<float>(hd));
  c->embed_scale = std::sqrt(static_cast<float>(c->dim));
  c->final_softcap = static_cast<float>(GetNumberOr(g, a + "final_logit_softcapping", 0));
  if (!(c->final_softcap >= 0) || !std::isfinite(c->final_softcap)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", a, "final_logit_softcapping ", c->final_softcap));
  }
  c->ffn_act = ModelConfig::FfnAct::kGeGluTanhGgml;
  c->post_norms = true;
  return absl::OkStatus();
}

}  // namespace ragkv::model::internal
