#include "blend/internal/selectors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/status_macros.h"
#include "blend/recompute_budget.h"
#include "kernels/deviation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace ragkv::blend::internal {

void ChunkHeadScores(absl::Span<const int32_t> cand_pos, absl::Span<const int64_t> seg_offset,
                     float* score) {
  for (size_t i = 0; i < cand_pos.size(); ++i) {
    const auto it = std::upper_bound(seg_offset.begin(), seg_offset.end(),
                                     static_cast<int64_t>(cand_pos[i]));
    const int64_t start = it == seg_offset.begin() ? 0 : *(it - 1);
    score[i] = -static_cast<float>(cand_pos[i] - start);
  }
}

namespace {

// WindowedSoftmax: each of the m rows of `logits` ([m, n], row i from query
// row i / group at position q_pos[..]) as a softmax over the keys its
// window shows, zero elsewhere (a row with none visible: all zero).
absl::Status WindowedSoftmax(float* logits, int64_t m, int64_t n, int group,
                             absl::Span<const int32_t> q_pos, int window) {
  using kernels::DType;
  using kernels::TensorView;
  if (window <= 0) return kernels::Softmax(TensorView::Contiguous(logits, DType::kF32, {m, n}));
  for (int64_t i = 0; i < m; ++i) {
    float* row = logits + i * n;
    const int64_t lo = std::clamp<int64_t>(q_pos[i / group] - window + 1, 0, n);
    std::fill(row, row + lo, 0.0f);
    if (lo == n) continue;
    RETURN_IF_ERROR(kernels::Softmax(TensorView::Contiguous(row + lo, DType::kF32, {1, n - lo})));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status QueryAttentionScores(const float* q, absl::Span<const int32_t> q_pos, int n_heads,
                                  const KeyPlane& keys, LayerAttention rule, int64_t n_context,
                                  absl::Span<const int32_t> cand_pos, float* score) {
  using kernels::DType;
  using kernels::TensorView;
  const auto nq = static_cast<int64_t>(q_pos.size());
  const int64_t hd = keys.head_dim;
  const float scale = rule.scale > 0 ? rule.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const int group = std::max(1, n_heads / keys.kv_heads);
  const int64_t m = nq * group;  // query rows x heads sharing one kv head
  std::vector<float> qg(m * hd), logits(m * n_context);
  std::vector<double> mass(n_context, 0.0);
  for (int g = 0; g < keys.kv_heads && n_context > 0; ++g) {
    for (int64_t r = 0; r < nq; ++r) {
      std::memcpy(qg.data() + r * group * hd, q + (r * n_heads + g * group) * hd,
                  group * hd * sizeof(float));
    }
    float* kg = const_cast<float*>(keys.data + g * keys.head_stride);
    const TensorView kv = TensorView::Contiguous(kg, DType::kF32, {n_context, hd});
    const TensorView lv = TensorView::Contiguous(logits.data(), DType::kF32, {m, n_context});
    RETURN_IF_ERROR(kernels::Gemm(TensorView::Contiguous(qg.data(), DType::kF32, {m, hd}), kv,
                                  /*trans_b=*/true, lv, scale));
    RETURN_IF_ERROR(WindowedSoftmax(logits.data(), m, n_context, group, q_pos, rule.window));
    for (int64_t i = 0; i < m; ++i) {
      const float* row = logits.data() + i * n_context;
      for (int64_t j = 0; j < n_context; ++j) mass[j] += row[j];
    }
  }
  for (size_t i = 0; i < cand_pos.size(); ++i) {
    score[i] = cand_pos[i] < n_context ? static_cast<float>(mass[cand_pos[i]]) : 0.0f;
  }
  return absl::OkStatus();
}

void AddMeanNormalized(const float* x, int64_t n, float* acc) {
  double ma = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) ma += acc[i], mx += x[i];
  const float sa = ma > 0 ? static_cast<float>(n / ma) : 1.0f;
  const float sx = mx > 0 ? static_cast<float>(n / mx) : 1.0f;
  for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] * sa + x[i] * sx;
}

void MultiplyBy(const float* x, int64_t n, float* acc) {
  for (int64_t i = 0; i < n; ++i) acc[i] *= x[i];
}

absl::Status RelativeDeviation(kernels::TensorView fk, kernels::TensorView ck,
                               kernels::TensorView fv, kernels::TensorView cv, float* out) {
  const int64_t n = ck.shape[1];
  std::vector<float> dv(n, 0.0f);
  RETURN_IF_ERROR(kernels::KvDeviation(fk, ck, out));
  RETURN_IF_ERROR(kernels::KvDeviation(fv, cv, dv.data()));
  // Mean squared norm of the cached rows (the planes are contiguous).
  auto mean_sq = [n](const kernels::TensorView& t) {
    const float* p = static_cast<const float*>(t.data);
    const int64_t count = t.shape[0] * t.shape[1] * t.shape[2];
    double s = 0;
    for (int64_t i = 0; i < count; ++i) s += static_cast<double>(p[i]) * p[i];
    return n > 0 && s > 0 ? s / static_cast<double>(n) : 1.0;
  };
  const double mk = mean_sq(ck), mv = mean_sq(cv);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(out[i] / mk + dv[i] / mv);
  return absl::OkStatus();
}

int64_t MassCount(const std::vector<float>& score, const std::vector<float>& err, double mass) {
  const int64_t n = static_cast<int64_t>(score.size());
  std::vector<int32_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  double total = 0, cum = 0;
  for (float x : err) total += std::max(0.0f, x);
  int64_t k = 0;
  while (k < n && cum < mass * total) cum += std::max(0.0f, err[order[k++]]);
  return k;
}

int64_t ThresholdCount(const float* err, int64_t n, double threshold) {
  const double t = threshold * ErrorUnit(err, n);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) k += err[i] >= t;
  return k;
}

int64_t AdaptiveCount(const AdaptiveRule& o, const std::vector<float>& score,
                      const std::vector<float>& err, int64_t selectable) {
  const auto n = static_cast<int64_t>(err.size());
  if (o.budget != nullptr) return o.budget->Count(err.data(), n, selectable, o.r_min, o.r_max);
  if (o.threshold > 0) return ThresholdCount(err.data(), n, o.threshold);
  return MassCount(score, err, o.mass);
}

}  // namespace ragkv::blend::internal
