#include "blend/internal/kv_rows.h"

#include <cstring>

namespace ragkv::blend::internal {

void GatherRows(const float* src, int64_t dim, absl::Span<const int32_t> idx, float* dst) {
  for (size_t i = 0; i < idx.size(); ++i) {
    std::memcpy(dst + i * dim, src + static_cast<int64_t>(idx[i]) * dim, dim * sizeof(float));
  }
}

void GatherKv(const KvPlane& p, absl::Span<const int32_t> pos, float* dst) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int h = 0; h < p.kv_heads; ++h) {
    const float* src = p.data + h * p.head_stride;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + (h * n + i) * p.head_dim, src + pos[i] * p.head_dim,
                  p.head_dim * sizeof(float));
    }
  }
}

void ScatterKv(const float* src, absl::Span<const int32_t> pos, const KvPlane& p) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int h = 0; h < p.kv_heads; ++h) {
    float* dst = p.data + h * p.head_stride;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + pos[i] * p.head_dim, src + (h * n + i) * p.head_dim,
                  p.head_dim * sizeof(float));
    }
  }
}

}  // namespace ragkv::blend::internal
