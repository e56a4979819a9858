#include "bench/blend/oracle_blend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status_macros.h"
#include "blend/quality_gate.h"
#include "kernels/deviation.h"

namespace ragkv::blend {
namespace {

using kernels::DType;
using kernels::TensorView;


// RowSq: sum over heads and dims of (a - b)^2 at position pos.
double RowSq(const model::KVCache& a, const model::KVCache& b, int l, bool key, int64_t pos) {
  const float* pa = CachePlane(a, l, key);
  const float* pb = CachePlane(b, l, key);
  const int64_t hd = a.head_dim();
  double s = 0;
  for (int h = 0; h < a.kv_heads(); ++h) {
    const float* x = pa + (h * a.capacity_tokens() + pos) * hd;
    const float* y = pb + (h * b.capacity_tokens() + pos) * hd;
    for (int64_t d = 0; d < hd; ++d) s += (x[d] - y[d]) * static_cast<double>(x[d] - y[d]);
  }
  return s;
}

// Scatter: src [kv_heads, pos.size(), hd] into layer l's K or V at `pos`.
void Scatter(const float* src, absl::Span<const int32_t> pos, model::KVCache* c, int l, bool key) {
  float* dst = key ? c->k_data(l) : c->v_data(l);
  const int64_t hd = c->head_dim(), n = static_cast<int64_t>(pos.size());
  for (int h = 0; h < c->kv_heads(); ++h) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + (h * c->capacity_tokens() + pos[i]) * hd, src + (h * n + i) * hd,
                  hd * sizeof(float));
    }
  }
}

}  // namespace

const float* CachePlane(const model::KVCache& c, int l, bool key) {
  const model::LayerKVView v = c.Layer(l, c.capacity_tokens());
  return static_cast<const float*>(key ? v.k.data : v.v.data);
}

void AddAttentionMass(const model::ModelConfig& cfg, const float* q, int64_t nq,
                      const model::KVCache& c, int l, int64_t qb, std::vector<double>* mass) {
  const int64_t hd = cfg.head_dim;
  const int group = std::max(1, cfg.n_heads / cfg.n_kv_heads);
  const float* keys = CachePlane(c, l, true);
  std::vector<double> lg(qb);
  for (int64_t r = 0; r < nq; ++r) {
    for (int head = 0; head < cfg.n_heads; ++head) {
      const float* qr = q + (r * cfg.n_heads + head) * hd;
      const float* kp = keys + (head / group) * c.capacity_tokens() * hd;
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < qb; ++j) {
        double d = 0;
        for (int64_t t = 0; t < hd; ++t) d += qr[t] * kp[j * hd + t];
        lg[j] = d / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, lg[j]);
      }
      for (int64_t j = 0; j < qb; ++j) sum += (lg[j] = std::exp(lg[j] - mx));
      for (int64_t j = 0; j < qb; ++j) (*mass)[j] += lg[j] / sum;
    }
  }
}

absl::StatusOr<model::KVCache> CopyCache(const model::ModelConfig& cfg, const model::KVCache& src,
                                         int64_t tokens) {
  ASSIGN_OR_RETURN(model::KVCache c, model::KVCache::Create(cfg, tokens));
  RETURN_IF_ERROR(c.set_num_tokens(tokens));
  const int64_t hd = c.head_dim();
  for (int l = 0; l < c.n_layers(); ++l) {
    for (bool key : {true, false}) {
      const float* s = CachePlane(src, l, key);
      float* d = key ? c.k_data(l) : c.v_data(l);
      for (int h = 0; h < c.kv_heads(); ++h) {
        std::memcpy(d + h * tokens * hd, s + h * src.capacity_tokens() * hd,
                    tokens * hd * sizeof(float));
      }
    }
  }
  return c;
}

absl::StatusOr<std::vector<float>> ReplayBlend(const model::Model& m, const OracleLayout& lay,
                                               const model::KVCache& cached,
                                               const std::vector<CheckLayer>& schedule,
                                               const Ranker& rank, const RatioChooser& choose,
                                               double* applied_ratio) {
  const model::ModelConfig& cfg = m.config();
  const int64_t N = lay.total(), qb = lay.query_begin, dim = cfg.dim;
  const int64_t kvh = cfg.n_kv_heads, hd = cfg.head_dim;
  ASSIGN_OR_RETURN(model::KVCache cache, CopyCache(cfg, cached, N));
  std::vector<int32_t> rows, toks;
  for (int64_t t = lay.first_selectable; t < N; ++t) {
    rows.push_back(static_cast<int32_t>(t));
    toks.push_back(lay.tokens[t]);
  }
  std::vector<float> hidden(rows.size() * dim);
  RETURN_IF_ERROR(m.Embed(toks, TensorView::Contiguous(hidden.data(), DType::kF32,
                                                       {static_cast<int64_t>(rows.size()), dim})));
  model::Workspace ws;
  size_t next = 0;
  double scale = 1.0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    int64_t n = static_cast<int64_t>(rows.size());
    if (next < schedule.size() && schedule[next].layer == l) {
      const CheckLayer& check = schedule[next++];
      int64_t nc = 0;
      while (nc < n && rows[nc] < qb) ++nc;  // rows are sorted: candidates, then the query
      int64_t want = std::min<int64_t>(
          nc, std::llround(std::min(1.0, check.ratio * scale) * lay.selectable()));
      if (want < nc || (choose && next == 1)) {
        const absl::Span<const int32_t> cand(rows.data(), nc);
        std::vector<float> fk(kvh * nc * hd), fv(kvh * nc * hd), score(nc);
        RETURN_IF_ERROR(m.ProjectKV(
            l, TensorView::Contiguous(hidden.data(), DType::kF32, {nc, dim}), rows.data(),
            TensorView::Contiguous(fk.data(), DType::kF32, {kvh, nc, hd}),
            TensorView::Contiguous(fv.data(), DType::kF32, {kvh, nc, hd}), &ws));
        CheckState st{l, cand, fk.data(), fv.data(), &cache, hidden.data() + nc * dim,
                      absl::Span<const int32_t>(rows.data() + nc, n - nc)};
        RETURN_IF_ERROR(rank(st, score.data()));
        if (choose && next == 1) {
          const double r = choose(st, score.data());
          if (applied_ratio != nullptr) *applied_ratio = r;
          scale = schedule.back().ratio > 0 ? r / schedule.back().ratio : 0;
          want = std::min<int64_t>(nc, std::llround(std::min(1.0, check.ratio * scale) *
                                                    lay.selectable()));
        }
        std::vector<int32_t> top(want);
        RETURN_IF_ERROR(kernels::TopK(score.data(), nc, want, top.data()));
        Scatter(fk.data(), cand, &cache, l, true);
        Scatter(fv.data(), cand, &cache, l, false);
        std::vector<uint8_t> keep(n, 1);
        std::fill(keep.begin(), keep.begin() + nc, 0);
        for (int32_t t : top) keep[t] = 1;
        int64_t w = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (!keep[i]) continue;
          rows[w] = rows[i];
          std::memmove(hidden.data() + w * dim, hidden.data() + i * dim, dim * sizeof(float));
          ++w;
        }
        rows.resize(w);
        hidden.resize(w * dim);
        n = w;
      }
    }
    RETURN_IF_ERROR(m.ForwardLayer(l, TensorView::Contiguous(hidden.data(), DType::kF32, {n, dim}),
                                   rows.data(), cache.Layer(l, N), model::LayerOptions{}, &ws));
  }
  const int64_t nq = N - qb, n = static_cast<int64_t>(rows.size());
  std::vector<float> logits(nq * cfg.vocab_size);
  RETURN_IF_ERROR(m.FinalNormAndLogits(
      TensorView::Contiguous(hidden.data() + (n - nq) * dim, DType::kF32, {nq, dim}),
      TensorView::Contiguous(logits.data(), DType::kF32, {nq, cfg.vocab_size}), &ws));
  return logits;
}

absl::StatusOr<std::unique_ptr<SwapModel>> SwapModel::Create(
    const model::Model& m, const OracleLayout& lay, const model::KVCache& truth,
    const model::KVCache& cached, int exact_layers, std::vector<float> ref) {
  const model::ModelConfig& cfg = m.config();
  ASSIGN_OR_RETURN(model::KVCache work, CopyCache(cfg, cached, lay.total()));
  std::unique_ptr<SwapModel> s(
      new SwapModel(m, lay, truth, std::move(work), exact_layers, std::move(ref)));
  ASSIGN_OR_RETURN(model::KVCache copy, CopyCache(cfg, cached, lay.total()));
  s->cached_copy_ = std::make_unique<model::KVCache>(std::move(copy));
  RETURN_IF_ERROR(s->Init());
  return s;
}

SwapModel::SwapModel(const model::Model& m, const OracleLayout& lay, const model::KVCache& truth,
                     model::KVCache work, int exact_layers, std::vector<float> ref)
    : m_(m), lay_(lay), truth_(truth), work_(std::move(work)), exact_layers_(exact_layers),
      ref_(std::move(ref)) {}

void SwapModel::CopyRow(const model::KVCache& from, int l, int32_t pos) {
  const int64_t hd = work_.head_dim();
  for (bool key : {true, false}) {
    const float* s = CachePlane(from, l, key);
    float* d = key ? work_.k_data(l) : work_.v_data(l);
    for (int h = 0; h < work_.kv_heads(); ++h) {
      std::memcpy(d + (h * work_.capacity_tokens() + pos) * hd,
                  s + (h * from.capacity_tokens() + pos) * hd, hd * sizeof(float));
    }
  }
}

absl::Status SwapModel::Init() {
  const model::ModelConfig& cfg = m_.config();
  const int64_t N = lay_.total(), qb = lay_.query_begin;
  for (int l = 0; l < std::min(exact_layers_, cfg.n_layers); ++l) {
    for (int64_t t = 0; t < qb; ++t) CopyRow(truth_, l, static_cast<int32_t>(t));
  }
  for (int64_t t = qb; t < N; ++t) qpos_.push_back(static_cast<int32_t>(t));
  dev_.assign(cfg.n_layers, std::vector<double>(qb, 0.0));
  for (int l = 0; l < cfg.n_layers; ++l) {
    // The cached rows' deviation from the truth, K and V each mean-normalized.
    double mk = 0, mv = 0;
    std::vector<double> dk(qb, 0.0), dv(qb, 0.0);
    for (int64_t j = lay_.first_selectable; j < qb; ++j) {
      mk += dk[j] = RowSq(truth_, *cached_copy_, l, true, j);
      mv += dv[j] = RowSq(truth_, *cached_copy_, l, false, j);
    }
    const double ns = std::max<double>(1, lay_.selectable());
    for (int64_t j = lay_.first_selectable; j < qb; ++j) {
      dev_[l][j] = (mk > 0 ? dk[j] * ns / mk : 0) + (mv > 0 ? dv[j] * ns / mv : 0);
    }
  }
  // Full prefill's query attention (and the query's layer input at
  // exact_layers); then the look-ahead's: the same query rows over the
  // work cache (exact below exact_layers, the cached rows above), what a
  // server can compute.
  RETURN_IF_ERROR(QueryPass(truth_, &mass_, &hq_));
  return QueryPass(work_, &ahead_, nullptr);
}

absl::Status SwapModel::QueryPass(const model::KVCache& over,
                                  std::vector<std::vector<double>>* mass,
                                  std::vector<float>* hidden_at_exact) {
  const model::ModelConfig& cfg = m_.config();
  const int64_t N = lay_.total(), qb = lay_.query_begin, dim = cfg.dim, nq = N - qb;
  std::vector<int32_t> qtok(lay_.tokens.begin() + qb, lay_.tokens.end());
  std::vector<float> h(nq * dim), q(nq * cfg.q_dim());
  const TensorView hv = TensorView::Contiguous(h.data(), DType::kF32, {nq, dim});
  RETURN_IF_ERROR(m_.Embed(qtok, hv));
  // The query rows' K/V land in a copy; the context rows' are `over`'s.
  ASSIGN_OR_RETURN(model::KVCache c, CopyCache(cfg, over, N));
  mass->assign(cfg.n_layers, std::vector<double>(qb, 0.0));
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (hidden_at_exact != nullptr && l == exact_layers_) *hidden_at_exact = h;
    RETURN_IF_ERROR(m_.ProjectQ(l, hv, qpos_.data(),
                                TensorView::Contiguous(q.data(), DType::kF32, {nq, cfg.q_dim()}),
                                &ws_));
    AddAttentionMass(cfg, q.data(), nq, c, l, qb, &(*mass)[l]);
    RETURN_IF_ERROR(
        m_.ForwardLayer(l, hv, qpos_.data(), c.Layer(l, N), model::LayerOptions{}, &ws_));
  }
  if (hidden_at_exact != nullptr && exact_layers_ >= cfg.n_layers) *hidden_at_exact = h;
  return absl::OkStatus();
}

absl::StatusOr<double> SwapModel::Kl(absl::Span<const int32_t> rows, int from_layer) {
  const model::ModelConfig& cfg = m_.config();
  const int64_t N = lay_.total(), nq = static_cast<int64_t>(qpos_.size()), dim = cfg.dim;
  from_layer = std::max(from_layer, exact_layers_);
  for (int l = from_layer; l < cfg.n_layers; ++l) {
    for (int32_t j : rows) CopyRow(truth_, l, j);
  }
  std::vector<float> h = hq_, logits(nq * cfg.vocab_size);
  absl::Status st;
  for (int l = exact_layers_; l < cfg.n_layers && st.ok(); ++l) {
    st = m_.ForwardLayer(l, TensorView::Contiguous(h.data(), DType::kF32, {nq, dim}),
                         qpos_.data(), work_.Layer(l, N), model::LayerOptions{}, &ws_);
  }
  if (st.ok()) {
    st = m_.FinalNormAndLogits(TensorView::Contiguous(h.data(), DType::kF32, {nq, dim}),
                               TensorView::Contiguous(logits.data(), DType::kF32,
                                                      {nq, cfg.vocab_size}),
                               &ws_);
  }
  for (int l = from_layer; l < cfg.n_layers; ++l) {
    for (int32_t j : rows) CopyRow(*cached_copy_, l, j);
  }
  RETURN_IF_ERROR(st);
  return QueryAgreement(ref_.data(), logits.data(), nq, cfg.vocab_size).kl;
}

}  // namespace ragkv::blend
