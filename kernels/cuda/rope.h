// rope.h (cuda): re-rotation of cached keys by per-chunk position deltas on
// the GPU. CPU twin: kernels::RerotateKeys (kernels/rope.h), applied chunk by
// chunk. See kernels/cuda/device.h for the conventions (device views,
// explicit stream, no allocation, error codes, thread safety).
#ifndef RAGKV_KERNELS_CUDA_ROPE_H_
#define RAGKV_KERNELS_CUDA_ROPE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"
#include "kernels/rope.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::cuda {

// RerotateKeysByChunk: in place, rotates token t of k by deltas[c] where c is
// the chunk holding t: chunk_offsets[c] <= t < chunk_offsets[c + 1]. Tokens
// outside [chunk_offsets[0], chunk_offsets[num_chunks]) are left untouched.
//   k: device [heads, tokens, head_dim], f16, bf16 or f32, unit stride in the
//      last dim, any head/token strides (the KV layout of docs/design.md §3).
//   chunk_offsets: device int32 [num_chunks + 1], non-decreasing, <= tokens.
//   deltas: device int32 [num_chunks] (may be negative).
//   params: head_dim (== k.shape[2], even, <= 512), theta, layout.
// Angles are delta * theta^(-2j/head_dim), formed and reduced mod 2*pi in
// double, then sin/cos in f32; half types are rotated in f32 and rounded
// once (round-to-nearest-even). Loads/stores are 16 bytes wide when the base
// pointer is 16-byte aligned and head/token strides and head_dim (head_dim/2
// for kHalfSplit) are multiples of 16 bytes' worth of elements, else pairwise.
// Errors: InvalidArgument (shape/dtype/params/null pointers/misalignment);
// CUDA launch errors as in device.h.
absl::Status RerotateKeysByChunk(TensorView k, const int32_t* chunk_offsets,
                                 const int32_t* deltas, int num_chunks,
                                 const RopeParams& params, CudaStream stream);

}  // namespace ragkv::kernels::cuda

#endif  // RAGKV_KERNELS_CUDA_ROPE_H_
