// kv_rows.h: row gathers and scatters of the Blender's forward: hidden
// rows of a [rows, dim] matrix, and K/V positions of one layer's plane of
// the fused cache. Private to blend/.
#ifndef RAGKV_BLEND_INTERNAL_KV_ROWS_H_
#define RAGKV_BLEND_INTERNAL_KV_ROWS_H_

#include <cstdint>

#include "absl/types/span.h"

namespace ragkv::blend::internal {

// KvPlane: one layer's K or V plane of the fused cache, [kv_heads][capacity][hd].
struct KvPlane {
  float* data;
  int64_t head_stride;
  int64_t head_dim;
  int kv_heads;
};

// GatherRows: rows `idx` of the [rows, dim] matrix src into dst [idx.size(), dim].
void GatherRows(const float* src, int64_t dim, absl::Span<const int32_t> idx, float* dst);
// GatherKv: positions `pos` of a plane into dst [kv_heads, pos.size(), hd].
void GatherKv(const KvPlane& p, absl::Span<const int32_t> pos, float* dst);
// ScatterKv: src [kv_heads, pos.size(), hd] into the plane at positions `pos`.
void ScatterKv(const float* src, absl::Span<const int32_t> pos, const KvPlane& p);

}  // namespace ragkv::blend::internal

#endif  // RAGKV_BLEND_INTERNAL_KV_ROWS_H_
