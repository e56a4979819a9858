// deviation.h (cuda): per-token KV deviation and top-k selection on the GPU
// (CacheBlend's high-KV-deviation token choice). CPU twins: kernels::KvDeviation
// and kernels::TopK (kernels/deviation.h). Conventions: kernels/cuda/device.h.
#ifndef RAGKV_KERNELS_CUDA_DEVIATION_H_
#define RAGKV_KERNELS_CUDA_DEVIATION_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::cuda {

// KvDeviation: out[t] (+)= sum over heads h, dims d of (a[h,t,d] - b[h,t,d])^2,
// accumulated in f32 (a fixed per-token order, so results are deterministic).
//   a, b: device [heads, tokens, head_dim], same shape and dtype (f32, f16 or
//         bf16), unit last stride, any head/token strides;
//   out: device f32 [tokens]; accumulate=true adds into it (K then V).
absl::Status KvDeviation(TensorView a, TensorView b, float* out, bool accumulate,
                         CudaStream stream);

// TopKWorkspaceBytes: device workspace TopK needs for n scores (n <= 2^31-1).
// Needs a CUDA device (CUB queries it): Unavailable without one.
absl::StatusOr<size_t> TopKWorkspaceBytes(int64_t n);

// TopK: out_indices[0..k) = indices of the k largest scores, by descending
// score, ties by lower index, NaN lowest (the CPU twin's order exactly).
// A stable CUB radix sort over all n scores (O(n)), then a k-element copy.
//   scores: device f32 [n]; out_indices: device int32 [k]; 0 <= k <= n;
//   workspace: device, >= TopKWorkspaceBytes(n) bytes, 256-byte aligned.
absl::Status TopK(const float* scores, int64_t n, int64_t k, int32_t* out_indices,
                  void* workspace, size_t workspace_bytes, CudaStream stream);

}  // namespace ragkv::kernels::cuda

#endif  // RAGKV_KERNELS_CUDA_DEVIATION_H_
