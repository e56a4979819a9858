#include "blend/internal/lookahead.h"

#include "base/status_macros.h"
#include "blend/internal/selectors.h"

namespace ragkv::blend::internal {

using kernels::DType;
using kernels::TensorView;

absl::Status QueryLookahead::Run(const model::Model& m, int from, std::vector<float> hidden,
                                 absl::Span<const int32_t> positions, model::KVCache& cache,
                                 int64_t n_total, int64_t n_context,
                                 absl::Span<const int32_t> cand_pos, kernels::CausalMode causal,
                                 const std::function<absl::Status(int)>& wait_layer,
                                 model::Workspace* ws) {
  const model::ModelConfig& cfg = m.config();
  const int64_t nq = static_cast<int64_t>(positions.size()), dim = cfg.dim;
  mass_.clear();
  if (nq == 0) return absl::OkStatus();  // nothing to look with: not ran()
  mass_.assign(cfg.n_layers, {});
  std::vector<float> q(nq * cfg.q_dim()), att(cand_pos.size());
  const TensorView h = TensorView::Contiguous(hidden.data(), DType::kF32, {nq, dim});
  model::LayerOptions lo;
  lo.causal = causal;
  for (int l = from; l < cfg.n_layers; ++l) {
    RETURN_IF_ERROR(wait_layer(l));
    if (l > from) {
      RETURN_IF_ERROR(m.ProjectQ(l, h, positions.data(),
                                 TensorView::Contiguous(q.data(), DType::kF32, {nq, cfg.q_dim()}),
                                 ws));
      const KeyPlane keys{cache.k_data(l), cache.capacity_tokens() * cfg.head_dim, cfg.head_dim,
                          cfg.n_kv_heads};
      const LayerAttention rule{cfg.attn_scale, cfg.Window(l)};
      RETURN_IF_ERROR(QueryAttentionScores(q.data(), positions, cfg.n_heads, keys, rule, n_context,
                                           cand_pos, att.data()));
      mass_[l].assign(n_context, 0.0f);
      for (size_t i = 0; i < cand_pos.size(); ++i) mass_[l][cand_pos[i]] = att[i];
    }
    if (l + 1 < cfg.n_layers) {
      RETURN_IF_ERROR(m.ForwardLayer(l, h, positions.data(), cache.Layer(l, n_total), lo, ws));
    }
  }
  return absl::OkStatus();
}

void QueryLookahead::Weigh(int layer, const std::vector<float>& att,
                           absl::Span<const int32_t> cand_pos, float* dev) const {
  std::vector<float> w = att;
  if (static_cast<size_t>(layer) + 1 < mass_.size()) {
    w.resize(cand_pos.size());
    After(layer, cand_pos, w.data());
  }
  MultiplyBy(w.data(), static_cast<int64_t>(cand_pos.size()), dev);
}

void QueryLookahead::After(int layer, absl::Span<const int32_t> cand_pos, float* score) const {
  for (size_t i = 0; i < cand_pos.size(); ++i) {
    double s = 0;
    for (size_t l = layer + 1; l < mass_.size(); ++l) {
      if (static_cast<size_t>(cand_pos[i]) < mass_[l].size()) s += mass_[l][cand_pos[i]];
    }
    score[i] = static_cast<float>(s);
  }
}

}  // namespace ragkv::blend::internal
