#include "model/internal/gguf_moe.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ragkv::model::internal {
namespace {

// Names of llama.cpp's llama_expert_gating_func_type values.
const char* GatingName(double v) {
  if (v == 0) return "none";
  if (v == 1) return "softmax";
  if (v == 2) return "sigmoid";
  if (v == 3) return "softmax_weight";
  if (v == 4) return "sqrt_softplus";
  return "unknown";
}

absl::Status Refuse(const std::string& path, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat(path, ": ", what));
}

// Count: a non-negative integer key; `def` when absent. InvalidArgument for
// a negative, fractional or huge value, Unimplemented for an array (a
// per-layer value, which ragkv does not run).
absl::StatusOr<int> Count(const Gguf& g, const std::string& path, const std::string& key, int def) {
  auto it = g.kv.find(key);
  if (it == g.kv.end()) return def;
  if (!it->second.is_number()) {
    return Refuse(path, absl::StrCat(key, " is not a single number (per-layer values are not supported)"));
  }
  const double x = std::get<double>(it->second.v);
  if (!(x >= 0) || x > (1 << 30) || x != std::floor(x)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " = ", x, " is out of range"));
  }
  return static_cast<int>(x);
}

}  // namespace

absl::Status ReadGgufMoe(const Gguf& g, const std::string& path, const std::string& arch,
                         ModelConfig* c) {
  const std::string p = arch + ".";
  auto n = Count(g, path, p + "expert_count", 0);
  if (!n.ok()) return n.status();
  if (*n == 0) {
    if (arch == "qwen3moe") {
      return absl::InvalidArgumentError(absl::StrCat(path, ": qwen3moe needs ", p, "expert_count > 0"));
    }
    return absl::OkStatus();
  }
  auto used = Count(g, path, p + "expert_used_count", 0);
  if (!used.ok()) return used.status();
  if (*n > kMaxExperts || *used < 1 || *used > *n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %sexpert_used_count %d of expert_count %d (need 1 <= used <= count <= %d)", path, p,
        *used, *n, kMaxExperts));
  }
  // Keys the pinned llama.cpp does not read for qwen3moe / llama: it always
  // runs softmax gating, renormalised top-k weights and no scale. A file
  // asking for other math is refused by the key's name.
  if (g.kv.count(p + "expert_gating_func")) {
    const double f = GetNumberOr(g, p + "expert_gating_func", -1);
    if (f != 1) {
      return Refuse(path, absl::StrFormat("%sexpert_gating_func %g (%s) is not supported (softmax is)",
                                          p, f, GatingName(f)));
    }
  }
  if (g.kv.count(p + "expert_weights_norm") && GetNumberOr(g, p + "expert_weights_norm", 0) == 0) {
    return Refuse(path, p + "expert_weights_norm false is not supported (the top-k weights are "
                            "renormalised, as llama.cpp does for " + arch + ")");
  }
  const double scale = GetNumberOr(g, p + "expert_weights_scale", 0);
  if (scale != 0 && scale != 1) {
    return Refuse(path, absl::StrFormat("%sexpert_weights_scale %g is not supported (1 is)", p, scale));
  }
  for (const char* key : {"expert_shared_count", "expert_shared_feed_forward_length"}) {
    auto s = Count(g, path, p + key, 0);
    if (!s.ok()) return s.status();
    if (*s > 0) return Refuse(path, absl::StrCat(p, key, " ", *s, ": shared experts are not supported"));
  }
  auto groups = Count(g, path, p + "expert_group_count", 0);
  if (!groups.ok()) return groups.status();
  if (*groups > 1) {
    return Refuse(path, absl::StrCat(p, "expert_group_count ", *groups,
                                     ": grouped expert selection is not supported"));
  }
  int ffn = c->hidden_dim;
  if (arch == "qwen3moe") {
    auto exp_ffn = Count(g, path, p + "expert_feed_forward_length", 0);
    if (!exp_ffn.ok()) return exp_ffn.status();
    ffn = *exp_ffn > 0 ? *exp_ffn : c->hidden_dim / *used;
  }
  if (ffn <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no expert feed-forward length"));
  }
  c->n_experts = *n;
  c->n_experts_used = *used;
  c->hidden_dim = ffn;
  return absl::OkStatus();
}

absl::Status RefuseMoeTensors(const Gguf& g, const std::string& path, const ModelConfig& c) {
  for (const auto& [name, info] : g.tensors) {
    if (name.rfind("blk.", 0) != 0) continue;
    const std::vector<std::string> parts = absl::StrSplit(name, '.');
    if (parts.size() < 3) continue;
    const std::string& t = parts[2];
    if (t.find("shexp") != std::string::npos) {
      return Refuse(path, absl::StrCat("tensor ", name, ": shared experts are not supported"));
    }
    if (t == "exp_probs_b") {
      return Refuse(path, absl::StrCat("tensor ", name,
                                       ": an expert selection bias is not supported"));
    }
    if (t == "ffn_gate_up_exps") {
      return Refuse(path, absl::StrCat("tensor ", name, ": a fused gate/up expert tensor is not "
                                       "supported for ", c.arch, " (the pinned llama.cpp reads "
                                       "separate ffn_gate_exps and ffn_up_exps)"));
    }
    if (c.n_experts == 0 && (t == "ffn_gate_inp" || t.find("_exps") != std::string::npos)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, " is an expert tensor but ",
                                                     c.arch, ".expert_count is absent or 0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ragkv::model::internal
