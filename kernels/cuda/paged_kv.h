// paged_kv.h (cuda): gather / scatter of selected token rows' K and V between
// ragkv's flat KV layout ([kv_heads, tokens, head_dim], docs/design.md §3) and a
// paged KV cache as vLLM keeps it: blocks of `block_size` (16) token slots,
// each slot [num_kv_heads, head_dim], one cache tensor for K and one for V,
// and a per-sequence block table mapping logical block i of a sequence to a
// physical block. Token at position p of sequence s lives in physical block
// table[s][p / block_size], slot p % block_size.
// The CPU oracle is a naive loop in the test. Conventions: device.h.
#ifndef RAGKV_KERNELS_CUDA_PAGED_KV_H_
#define RAGKV_KERNELS_CUDA_PAGED_KV_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::cuda {

// PagedKvCache: non-owning view of a paged K cache and V cache (device).
struct PagedKvCache {
  void* k_cache = nullptr;  // device, element (block, slot, head, d)
  void* v_cache = nullptr;  // device, same layout and strides as k_cache
  DType dtype = DType::kF16;
  int64_t num_blocks = 0;
  int block_size = 16;  // token slots per block (vLLM's default 16); > 0
  int num_kv_heads = 0;
  int head_dim = 0;
  // Strides in elements. All 0 (default) = vLLM's contiguous
  // [num_blocks, block_size, num_kv_heads, head_dim]; the last dim is unit.
  int64_t stride_block = 0, stride_slot = 0, stride_head = 0;
};

// BlockTable: device int32 [num_seqs, max_blocks_per_seq] (row-major),
// physical block ids; entries outside [0, num_blocks) mark unmapped blocks.
struct BlockTable {
  const int32_t* data = nullptr;
  int num_seqs = 0;
  int max_blocks_per_seq = 0;
};

// PagedRows: which rows move (device int32 arrays of `count` entries).
// Row i pairs flat token flat_rows[i] with position positions[i] of sequence
// seq_ids[i] (seq_ids null: every row is in sequence 0). A row whose index,
// sequence, position or block is out of range is skipped, and counted into
// *invalid_count (device int32, optional, added to with atomics).
struct PagedRows {
  const int32_t* flat_rows = nullptr;
  const int32_t* seq_ids = nullptr;
  const int32_t* positions = nullptr;
  int64_t count = 0;
  int32_t* invalid_count = nullptr;
};

// ScatterRowsToPaged: cache[slot of row i] = k/v[:, flat_rows[i], :] for K and V.
//   k, v: device [num_kv_heads, tokens, head_dim], cache.dtype, unit last stride.
// Rows must map to distinct slots (else the winner is unspecified).
absl::Status ScatterRowsToPaged(TensorView k, TensorView v, const PagedRows& rows,
                                const PagedKvCache& cache, const BlockTable& table,
                                CudaStream stream);

// GatherRowsFromPaged: k/v[:, flat_rows[i], :] = cache[slot of row i].
// Rows must name distinct flat_rows.
absl::Status GatherRowsFromPaged(const PagedKvCache& cache, const BlockTable& table,
                                 const PagedRows& rows, TensorView k, TensorView v,
                                 CudaStream stream);

}  // namespace ragkv::kernels::cuda

#endif  // RAGKV_KERNELS_CUDA_PAGED_KV_H_
