#include "blend/internal/lookahead.h"

#include <algorithm>

#include "base/status_macros.h"
#include "blend/internal/selectors.h"

namespace ragkv::blend::internal {

using kernels::DType;
using kernels::TensorView;

absl::Status QueryLookahead::Run(const model::Model& m, int from, std::vector<float> hidden,
                                 absl::Span<const int32_t> positions, model::KVCache& cache,
                                 int64_t n_total, int64_t n_context,
                                 absl::Span<const int32_t> cand_pos, kernels::CausalMode causal,
                                 std::function<absl::Status(int)> wait_layer, model::Workspace* ws,
                                 int horizon) {
  mass_.clear();
  reached_ = -1;
  if (positions.empty()) return absl::OkStatus();  // nothing to look with: not ran()
  m_ = &m, cache_ = &cache;
  hidden_ = std::move(hidden);
  positions_.assign(positions.begin(), positions.end());
  cand_pos_.assign(cand_pos.begin(), cand_pos.end());
  q_.resize(positions.size() * m.config().q_dim());
  att_.resize(cand_pos.size());
  n_total_ = n_total, n_context_ = n_context, causal_ = causal;
  wait_layer_ = std::move(wait_layer);
  horizon_ = horizon;
  mass_.assign(m.config().n_layers, {});
  reached_ = from;
  RETURN_IF_ERROR(wait_layer_(from));
  return LookFrom(from, ws);
}

absl::Status QueryLookahead::LookFrom(int layer, model::Workspace* ws) {
  if (!ran()) return absl::OkStatus();
  return Advance(LookaheadTarget(layer, horizon_, m_->config().n_layers), ws);
}

absl::Status QueryLookahead::Advance(int to, model::Workspace* ws) {
  if (!ran()) return absl::OkStatus();
  to = std::min(to, m_->config().n_layers - 1);
  while (reached_ < to) {
    RETURN_IF_ERROR(Step(reached_ + 1, ws));
    ++reached_;
  }
  return absl::OkStatus();
}

absl::Status QueryLookahead::Step(int l, model::Workspace* ws) {
  const model::ModelConfig& cfg = m_->config();
  const int64_t nq = static_cast<int64_t>(positions_.size());
  const TensorView h = TensorView::Contiguous(hidden_.data(), DType::kF32, {nq, cfg.dim});
  RETURN_IF_ERROR(wait_layer_(l));
  model::LayerOptions lo;
  lo.causal = causal_;
  RETURN_IF_ERROR(
      m_->ForwardLayer(l - 1, h, positions_.data(), cache_->Layer(l - 1, n_total_), lo, ws));
  RETURN_IF_ERROR(m_->ProjectQ(l, h, positions_.data(),
                               TensorView::Contiguous(q_.data(), DType::kF32, {nq, cfg.q_dim()}),
                               ws));
  const KeyPlane keys{cache_->k_data(l), cache_->capacity_tokens() * cfg.head_dim, cfg.head_dim,
                      cfg.n_kv_heads};
  const LayerAttention rule{cfg.attn_scale, cfg.Window(l)};
  RETURN_IF_ERROR(QueryAttentionScores(q_.data(), positions_, cfg.n_heads, keys, rule, n_context_,
                                       cand_pos_, att_.data()));
  mass_[l].assign(n_context_, 0.0f);
  for (size_t i = 0; i < cand_pos_.size(); ++i) mass_[l][cand_pos_[i]] = att_[i];
  return absl::OkStatus();
}

void QueryLookahead::Weigh(int layer, const std::vector<float>& att,
                           absl::Span<const int32_t> cand_pos, float* dev) const {
  std::vector<float> w = att;
  if (layer < reached_ || att.size() != cand_pos.size()) {  // (no attention: the mass, or 0)
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
