#include "bench/blend/oracle_selectors.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "base/status_macros.h"

namespace ragkv::blend {
namespace {

using kernels::DType;
using kernels::TensorView;

// Order: candidate indices by descending score, ties to the lower index.
std::vector<int> Order(const float* score, size_t n) {
  std::vector<int> o(n);
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return score[a] > score[b]; });
  return o;
}

}  // namespace

absl::StatusOr<RowErrors> Errors(const model::Model& m, int64_t qb, const CheckState& st) {
  const model::ModelConfig& cfg = m.config();
  const int64_t nc = static_cast<int64_t>(st.cand_pos.size());
  const int64_t nq = static_cast<int64_t>(st.query_pos.size()), hd = cfg.head_dim;
  const model::KVCache& c = *st.cache;
  RowErrors e;
  std::vector<double> dk(nc, 0), dv(nc, 0);
  double mdk = 0, mdv = 0, nk = 0, nv = 0;
  for (bool key : {true, false}) {
    const float* plane = CachePlane(c, st.layer, key);
    const float* fresh = key ? st.fresh_k : st.fresh_v;
    for (int h = 0; h < cfg.n_kv_heads; ++h) {
      for (int64_t i = 0; i < nc; ++i) {
        const float* x = fresh + (h * nc + i) * hd;
        const float* y = plane + (h * c.capacity_tokens() + st.cand_pos[i]) * hd;
        double d = 0, norm = 0;
        for (int64_t t = 0; t < hd; ++t) d += (x[t] - y[t]) * double(x[t] - y[t]), norm += y[t] * double(y[t]);
        (key ? dk : dv)[i] += d;
        (key ? nk : nv) += norm / nc;
      }
    }
  }
  for (int64_t i = 0; i < nc; ++i) mdk += dk[i] / nc, mdv += dv[i] / nc;
  // Attention of the query rows on the context [0, qb) at this layer.
  std::vector<float> q(nq * cfg.q_dim());
  model::Workspace ws;
  RETURN_IF_ERROR(m.ProjectQ(st.layer,
                             TensorView::Contiguous(st.query_hidden, DType::kF32, {nq, cfg.dim}),
                             st.query_pos.data(),
                             TensorView::Contiguous(q.data(), DType::kF32, {nq, cfg.q_dim()}), &ws));
  std::vector<double> mass(qb, 0.0);
  AddAttentionMass(cfg, q.data(), nq, c, st.layer, qb, &mass);
  e.dev.resize(nc), e.att.resize(nc), e.err_abs.resize(nc);
  const double heads = static_cast<double>(std::max<int64_t>(1, nq) * cfg.n_heads);
  for (int64_t i = 0; i < nc; ++i) {
    e.dev[i] = static_cast<float>((mdk > 0 ? dk[i] / mdk : 0) + (mdv > 0 ? dv[i] / mdv : 0));
    e.att[i] = static_cast<float>(mass[st.cand_pos[i]]);
    e.err_abs[i] = static_cast<float>(mass[st.cand_pos[i]] / heads *
                                      ((nk > 0 ? dk[i] / nk : 0) + (nv > 0 ? dv[i] / nv : 0)));
  }
  return e;
}

Ranker RealRanker(const std::string& name, const model::Model& m, int64_t qb) {
  if (name != "attended-deviation" && name != "attended-linear") return nullptr;
  const bool linear = name == "attended-linear";
  return [&m, qb, linear](const CheckState& st, float* score) -> absl::Status {
    ASSIGN_OR_RETURN(RowErrors e, Errors(m, qb, st));
    for (size_t i = 0; i < e.dev.size(); ++i) {
      score[i] = e.att[i] * (linear ? std::sqrt(e.dev[i]) : e.dev[i]);
    }
    return absl::OkStatus();
  };
}

RatioChooser StopRule(const std::string& name, const model::Model& m, int64_t qb,
                      int64_t selectable, double r_min, double r_max) {
  const size_t at = name.find('@');
  if (at == std::string::npos) return nullptr;
  const std::string kind = name.substr(0, at);
  const double x = std::atof(name.c_str() + at + 1);
  const size_t colon = name.find(':', at);
  const double alpha = colon == std::string::npos ? 0.0 : std::atof(name.c_str() + colon + 1);
  if (kind != "mass" && kind != "abs" && kind != "res" && kind != "pow") return nullptr;
  return [&m, qb, selectable, r_min, r_max, kind, x, alpha](const CheckState& st,
                                                            const float* score) {
    absl::StatusOr<RowErrors> e = Errors(m, qb, st);
    if (!e.ok()) return r_max;
    const size_t nc = e->dev.size();
    const std::vector<int> order = Order(score, nc);
    std::vector<double> err(nc);
    for (size_t i = 0; i < nc; ++i) {
      err[i] = kind == "mass" ? double(e->dev[i]) * e->att[i] : double(e->err_abs[i]);
    }
    const double total = std::accumulate(err.begin(), err.end(), 0.0);
    size_t k = 0;
    if (kind == "abs" || kind == "pow") {
      const double t = kind == "abs" ? x : x * std::pow(total, alpha);
      for (size_t i = 0; i < nc; ++i) k += err[i] >= t;
    } else {
      double cum = 0;
      while (k < nc && (kind == "mass" ? cum < x * total : total - cum > x)) cum += err[order[k++]];
    }
    const double r = static_cast<double>(k) / std::max<double>(1, selectable);
    return std::clamp(r, r_min, r_max);
  };
}

}  // namespace ragkv::blend
