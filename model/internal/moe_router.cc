#include "model/internal/moe_router.h"

#include <algorithm>
#include <cmath>

namespace ragkv::model::internal {

void RouteTopK(const float* logits, int64_t rows, int n_experts, int k, float* probs,
               int32_t* experts, float* weights) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * n_experts;
    float* p = probs + r * n_experts;
    float mx = -INFINITY;
    for (int e = 0; e < n_experts; ++e) mx = std::max(mx, x[e]);
    double sum = 0;
    for (int e = 0; e < n_experts; ++e) {
      p[e] = std::exp(x[e] - mx);
      sum += p[e];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int e = 0; e < n_experts; ++e) p[e] *= inv;
    // Selection by k passes of a strict maximum: ties keep the lower index.
    int32_t* sel = experts + r * k;
    float* w = weights + r * k;
    float total = 0;
    for (int i = 0; i < k; ++i) {
      int best = -1;
      for (int e = 0; e < n_experts; ++e) {
        if (std::find(sel, sel + i, e) != sel + i) continue;
        if (best < 0 || p[e] > p[best]) best = e;
      }
      sel[i] = best;
      w[i] = p[best];
      total += w[i];
    }
    total = std::max(total, kMoeWeightSumFloor);
    for (int i = 0; i < k; ++i) w[i] /= total;
  }
}

}  // namespace ragkv::model::internal
