// launch.h: plain-C++ launch interface between the public host API (.cc,
// compiled by the host compiler, absl::Status) and the CUDA translation units
// (.cu, compiled by nvcc, no abseil). Every launcher validates nothing (the
// .cc callers do), enqueues its kernel(s) on `stream` and returns the
// cudaError_t of the launch as an int (0 = cudaSuccess), which the caller
// translates in kernels/cuda/internal/cuda_status.h.
//
// All pointers are device pointers unless a field says otherwise. Strides are
// in elements. Private to kernels/cuda.
#ifndef RAGKV_KERNELS_CUDA_INTERNAL_LAUNCH_H_
#define RAGKV_KERNELS_CUDA_INTERNAL_LAUNCH_H_

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace ragkv::kernels::cuda::internal {

using Stream = CUstream_st*;

// Element type codes (mirror kernels::DType values for the float types).
enum ElemType : int { kElemF32 = 0, kElemF16 = 1, kElemBF16 = 2 };

// ---------------------------------------------------------------- RoPE ----
struct RerotateLaunch {
  void* data = nullptr;  // [heads, tokens, head_dim]
  int elem = kElemF16;
  int64_t heads = 0, tokens = 0;
  int head_dim = 0;
  int64_t stride_head = 0, stride_token = 0;
  const int32_t* chunk_offsets = nullptr;  // [num_chunks + 1], ascending token offsets
  const int32_t* deltas = nullptr;         // [num_chunks]
  int num_chunks = 0;
  double theta = 10000.0;
  bool half_split = false;  // RopeLayout::kHalfSplit
  int vec_elems = 2;        // elements per vector access (power of two, 16 bytes max)
};
int LaunchRerotate(const RerotateLaunch& a, Stream stream);

// ----------------------------------------------------------- Deviation ----
struct DeviationLaunch {
  const void* a = nullptr;  // [heads, tokens, head_dim]
  const void* b = nullptr;
  int elem = kElemF16;
  int64_t heads = 0, tokens = 0;
  int head_dim = 0;
  int64_t a_stride_head = 0, a_stride_token = 0;
  int64_t b_stride_head = 0, b_stride_token = 0;
  float* out = nullptr;  // [tokens]
  bool accumulate = false;
  int vec_elems = 1;
};
int LaunchKvDeviation(const DeviationLaunch& a, Stream stream);

// ---------------------------------------------------------------- TopK ----
// Workspace layout is private to topk_kernels.cu; bytes from TopKTempBytes.
int TopKTempBytes(int n, size_t* bytes);
int LaunchTopK(const float* scores, int n, int k, int32_t* out_indices, void* workspace,
               size_t workspace_bytes, Stream stream);

// ------------------------------------------------------------ Paged KV ----
struct PagedCopyLaunch {
  // Contiguous side: [kv_heads, tokens, head_dim] for K and for V.
  void* k_flat = nullptr;
  void* v_flat = nullptr;
  int64_t flat_tokens = 0;
  int64_t k_flat_stride_head = 0, k_flat_stride_token = 0;
  int64_t v_flat_stride_head = 0, v_flat_stride_token = 0;
  // Paged side: element (block, slot, head, d).
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t num_blocks = 0;
  int block_size = 16;
  int64_t cache_stride_block = 0, cache_stride_slot = 0, cache_stride_head = 0;
  // Block table [num_seqs, max_blocks_per_seq].
  const int32_t* block_table = nullptr;
  int num_seqs = 0;
  int max_blocks_per_seq = 0;
  // Rows.
  int64_t n = 0;
  const int32_t* flat_rows = nullptr;  // [n] token index on the flat side
  const int32_t* seq_ids = nullptr;    // [n] or null (all sequence 0)
  const int32_t* positions = nullptr;  // [n] position within the sequence
  int32_t* invalid_count = nullptr;    // optional: += rows skipped as out of range
  int kv_heads = 0;
  int head_dim = 0;
  int elem_bytes = 2;
  int unit_bytes = 2;         // bytes per copy unit: 16, 8, 4 or 2
  bool to_paged = true;       // scatter (flat -> paged) or gather (paged -> flat)
};
int LaunchPagedCopy(const PagedCopyLaunch& a, Stream stream);

// ----------------------------------------------------------- Attention ----
// One unit of attention work: a tile of up to `tile_vectors` query vectors
// (vector = (row, head-in-group) pair, row-major over the request's rows) of
// one request, for every kv head. The plan picks the tile size: the large
// one while it still yields at least kAttnLargeTileMinCtas CTAs (items x kv
// heads; about 1.5 waves of 2 CTAs per SM on a 132-SM H100/H200), the small
// one otherwise (fewer, longer CTAs leave SMs idle).
inline constexpr int kAttnTileVectorsLarge = 128;
inline constexpr int kAttnTileVectorsSmall = 64;
inline constexpr int64_t kAttnLargeTileMinCtas = 384;
struct AttnWorkItem {
  int32_t row_begin;  // global index of the request's first query row
  int32_t num_rows;   // query rows of the request
  int32_t vec_begin;  // first vector of this tile (within the request)
  int32_t vec_count;  // vectors in this tile (<= the plan's tile_vectors)
  int32_t kv_begin;   // token offset of the request's keys in K/V
  int32_t kv_len;     // keys of the request
  int32_t pad0, pad1;
};
static_assert(sizeof(AttnWorkItem) == 32, "AttnWorkItem is uploaded as raw bytes");

struct AttnLaunch {
  const AttnWorkItem* items = nullptr;  // device copy of the plan
  int num_items = 0;
  const void* q = nullptr;  // [rows, num_heads, head_dim]
  int64_t q_stride_row = 0, q_stride_head = 0;
  const void* k = nullptr;  // [num_kv_heads, total_kv, head_dim]
  const void* v = nullptr;
  int64_t k_stride_head = 0, k_stride_token = 0;
  int64_t v_stride_head = 0, v_stride_token = 0;
  void* out = nullptr;  // [rows, num_heads, head_dim], dtype of q
  int64_t o_stride_row = 0, o_stride_head = 0;
  float* lse = nullptr;  // optional [rows, num_heads], natural-log LSE
  const int32_t* positions = nullptr;  // [rows]
  int elem = kElemF16;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 0.f;
  bool bottom_right = false;
  bool tensor_core = true;  // else the SIMT reference path
  int tile_vectors = kAttnTileVectorsSmall;  // the plan's: Small or Large
};
// Returns the dynamic shared memory the tensor-core kernel needs (0 for an
// unsupported head_dim / tile size).
size_t AttnTensorCoreSmemBytes(int head_dim, int tile_vectors);
int LaunchAttention(const AttnLaunch& a, Stream stream);

}  // namespace ragkv::kernels::cuda::internal

#endif  // RAGKV_KERNELS_CUDA_INTERNAL_LAUNCH_H_
