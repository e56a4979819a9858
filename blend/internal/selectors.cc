#include "blend/internal/selectors.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

void QueryAttentionScores(const float* q, int64_t nq, int n_heads, const KeyPlane& keys,
                          int64_t n_context, absl::Span<const int32_t> cand_pos, float* score) {
  const int64_t hd = keys.head_dim;
  const int group = std::max(1, n_heads / keys.kv_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<double> mass(n_context, 0.0), logit(n_context);
  for (int64_t r = 0; r < nq; ++r) {
    for (int h = 0; h < n_heads; ++h) {
      const float* qv = q + (r * n_heads + h) * hd;
      const float* kbase = keys.data + (h / group) * keys.head_stride;
      double mx = -1e300;
      for (int64_t j = 0; j < n_context; ++j) {
        const float* kv = kbase + j * hd;
        float dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += qv[d] * kv[d];
        logit[j] = dot * scale;
        mx = std::max(mx, logit[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n_context; ++j) sum += (logit[j] = std::exp(logit[j] - mx));
      for (int64_t j = 0; j < n_context; ++j) mass[j] += logit[j] / sum;
    }
  }
  for (size_t i = 0; i < cand_pos.size(); ++i) {
    score[i] = cand_pos[i] < n_context ? static_cast<float>(mass[cand_pos[i]]) : 0.0f;
  }
}

void AddMeanNormalized(const float* x, int64_t n, float* acc) {
  double ma = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) ma += acc[i], mx += x[i];
  const float sa = ma > 0 ? static_cast<float>(n / ma) : 1.0f;
  const float sx = mx > 0 ? static_cast<float>(n / mx) : 1.0f;
  for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] * sa + x[i] * sx;
}

}  // namespace ragkv::blend::internal
