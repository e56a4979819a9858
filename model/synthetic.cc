#include "model/synthetic.h"

#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace ragkv::model {
namespace {

// Portable normal generator: SplitMix64 -> uniform -> Box-Muller.
class Normal {
 public:
  explicit Normal(uint64_t seed) : s_(seed) {}
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = Uniform(), u2 = Uniform();
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2.0 * M_PI * u2));
  }

 private:
  uint64_t SplitMix() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (static_cast<double>(SplitMix() >> 11) + 0.5) * 0x1.0p-53; }
  uint64_t s_;
  bool has_spare_ = false;
  float spare_ = 0;
};

void Fill(Normal& g, std::vector<float>* v, size_t n, double stddev) {
  v->resize(n);
  for (size_t i = 0; i < n; ++i) (*v)[i] = static_cast<float>(stddev * g.Next());
}

}  // namespace

absl::StatusOr<SyntheticSpec> ParseSyntheticSpec(const std::string& spec_in) {
  absl::string_view spec = spec_in;
  absl::ConsumePrefix(&spec, "synthetic:");
  SyntheticSpec s;
  ModelConfig& c = s.config;
  c.arch = "llama";
  c.max_seq_len = 4096;
  c.n_kv_heads = 0;
  for (absl::string_view kv : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    const std::string& k = p.first;
    const std::string& v = p.second;
    auto bad = [&] {
      return absl::InvalidArgumentError(
          absl::StrCat("synthetic spec '", spec_in, "': bad value '", v, "' for ", k));
    };
    int iv = 0;
    if (k == "theta" || k == "eps") {
      float f = 0;
      if (!absl::SimpleAtof(v, &f)) return bad();
      (k == "theta" ? c.rope_theta : c.norm_eps) = f;
      continue;
    }
    if (k == "seed") {
      if (!absl::SimpleAtoi(v, &s.seed)) return bad();
      continue;
    }
    if (!absl::SimpleAtoi(v, &iv) || iv <= 0) return bad();
    if (k == "layers") c.n_layers = iv;
    else if (k == "dim") c.dim = iv;
    else if (k == "heads") c.n_heads = iv;
    else if (k == "kv_heads") c.n_kv_heads = iv;
    else if (k == "ffn") c.hidden_dim = iv;
    else if (k == "vocab") c.vocab_size = iv;
    else if (k == "ctx") c.max_seq_len = iv;
    else if (k == "head_dim") c.head_dim = iv;
    else {
      return absl::InvalidArgumentError(absl::StrCat(
          "synthetic spec '", spec_in, "': unknown key '", k,
          "' (layers, dim, heads, kv_heads, ffn, vocab, ctx, head_dim, seed, theta, eps)"));
    }
  }
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  absl::Status st = c.Validate();
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic spec '", spec_in, "': ", st.message()));
  }
  return s;
}

absl::StatusOr<ModelParts> MakeSyntheticParts(const SyntheticSpec& spec) {
  ModelParts parts;
  parts.format = ModelFormat::kSynthetic;
  parts.config = spec.config;
  RETURN_IF_ERROR(parts.config.Validate());
  const ModelConfig& c = parts.config;
  const size_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.hidden_dim,
               vocab = c.vocab_size;
  Normal g(spec.seed * 0x100000001B3ull + 0x5EEDull);
  ModelWeights& w = parts.weights;
  const double s_dim = 1.0 / std::sqrt(double(dim)), s_q = 1.0 / std::sqrt(double(qd)),
               s_ffn = 1.0 / std::sqrt(double(ffn));
  Fill(g, &w.tok_embeddings, vocab * dim, 1.0);
  w.layers.resize(c.n_layers);
  for (auto& l : w.layers) {
    l.attn_norm.assign(dim, 1.0f);
    l.ffn_norm.assign(dim, 1.0f);
    Fill(g, &l.wq, qd * dim, s_dim);
    Fill(g, &l.wk, kvd * dim, s_dim);
    Fill(g, &l.wv, kvd * dim, s_dim);
    Fill(g, &l.wo, dim * qd, s_q);
    Fill(g, &l.w_gate, ffn * dim, s_dim);
    Fill(g, &l.w_up, ffn * dim, s_dim);
    Fill(g, &l.w_down, dim * ffn, s_ffn);
  }
  w.final_norm.assign(dim, 1.0f);
  Fill(g, &w.classifier, vocab * dim, s_dim);
  return parts;
}

absl::StatusOr<std::unique_ptr<Model>> MakeSyntheticModel(const SyntheticSpec& spec) {
  ASSIGN_OR_RETURN(ModelParts parts, MakeSyntheticParts(spec));
  return Model::Create(std::move(parts.config), std::move(parts.weights));
}

}  // namespace ragkv::model
