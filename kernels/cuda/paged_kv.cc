#include "kernels/cuda/paged_kv.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/internal/checks.h"
#include "kernels/cuda/internal/cuda_status.h"
#include "kernels/cuda/internal/launch.h"

namespace ragkv::kernels::cuda {
namespace {

absl::Status PagedCopy(TensorView k, TensorView v, const PagedRows& rows,
                       const PagedKvCache& cache_in, const BlockTable& table, bool to_paged,
                       CudaStream stream) {
  const char* what = to_paged ? "ScatterRowsToPaged" : "GatherRowsFromPaged";
  if (auto s = internal::CheckKvView(k, what); !s.ok()) return s;
  if (auto s = internal::CheckKvView(v, what); !s.ok()) return s;
  PagedKvCache c = cache_in;
  if (c.num_kv_heads <= 0 || c.head_dim <= 0 || c.block_size <= 0 || c.num_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": bad cache geometry"));
  }
  if (c.stride_block == 0 && c.stride_slot == 0 && c.stride_head == 0) {
    c.stride_head = c.head_dim;
    c.stride_slot = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
    c.stride_block = c.stride_slot * c.block_size;
  }
  for (const TensorView* t : {&k, &v}) {
    if (t->dtype != c.dtype || t->shape[0] != c.num_kv_heads || t->shape[2] != c.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": flat view ", t->DebugString(),
                                                     " does not match cache ", DTypeName(c.dtype),
                                                     " kv_heads=", c.num_kv_heads,
                                                     " head_dim=", c.head_dim));
    }
  }
  if (k.shape[1] != v.shape[1]) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": k and v token counts differ"));
  }
  if (rows.count < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative count"));
  if (rows.count == 0) return absl::OkStatus();
  if (rows.flat_rows == nullptr || rows.positions == nullptr || table.data == nullptr ||
      c.k_cache == nullptr || c.v_cache == nullptr || table.num_seqs <= 0 ||
      table.max_blocks_per_seq <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null rows/positions/block table/cache or empty block table"));
  }
  if (k.shape[1] > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": more than 2^31-1 flat tokens"));
  }

  const int es = static_cast<int>(DTypeSize(c.dtype));
  int unit = 0;
  for (int u : {16, 8, 4, 2}) {
    if (u < es) break;
    auto ok_ptr = [u](const void* p) { return internal::AlignedTo(p, u); };
    auto ok_stride = [u, es](int64_t s) { return (s * es) % u == 0; };
    if (ok_ptr(k.data) && ok_ptr(v.data) && ok_ptr(c.k_cache) && ok_ptr(c.v_cache) &&
        (c.head_dim * es) % u == 0 && ok_stride(k.stride[0]) && ok_stride(k.stride[1]) &&
        ok_stride(v.stride[0]) && ok_stride(v.stride[1]) && ok_stride(c.stride_block) &&
        ok_stride(c.stride_slot) && ok_stride(c.stride_head)) {
      unit = u;
      break;
    }
  }
  if (unit == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": misaligned pointers or strides"));
  }

  internal::PagedCopyLaunch a;
  a.k_flat = k.data;
  a.v_flat = v.data;
  a.flat_tokens = k.shape[1];
  a.k_flat_stride_head = k.stride[0];
  a.k_flat_stride_token = k.stride[1];
  a.v_flat_stride_head = v.stride[0];
  a.v_flat_stride_token = v.stride[1];
  a.k_cache = c.k_cache;
  a.v_cache = c.v_cache;
  a.num_blocks = c.num_blocks;
  a.block_size = c.block_size;
  a.cache_stride_block = c.stride_block;
  a.cache_stride_slot = c.stride_slot;
  a.cache_stride_head = c.stride_head;
  a.block_table = table.data;
  a.num_seqs = table.num_seqs;
  a.max_blocks_per_seq = table.max_blocks_per_seq;
  a.n = rows.count;
  a.flat_rows = rows.flat_rows;
  a.seq_ids = rows.seq_ids;
  a.positions = rows.positions;
  a.invalid_count = rows.invalid_count;
  a.kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.elem_bytes = es;
  a.unit_bytes = unit;
  a.to_paged = to_paged;
  RAGKV_CUDA_RETURN_IF_ERROR(internal::LaunchPagedCopy(a, stream), absl::StrCat(what, " launch"));
  return absl::OkStatus();
}

}  // namespace

absl::Status ScatterRowsToPaged(TensorView k, TensorView v, const PagedRows& rows,
                                const PagedKvCache& cache, const BlockTable& table,
                                CudaStream stream) {
  return PagedCopy(k, v, rows, cache, table, /*to_paged=*/true, stream);
}

absl::Status GatherRowsFromPaged(const PagedKvCache& cache, const BlockTable& table,
                                 const PagedRows& rows, TensorView k, TensorView v,
                                 CudaStream stream) {
  return PagedCopy(k, v, rows, cache, table, /*to_paged=*/false, stream);
}

}  // namespace ragkv::kernels::cuda
