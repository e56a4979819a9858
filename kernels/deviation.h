// deviation.h: per-token KV deviation and top-k selection (CacheBlend's HKVD).
#ifndef RAGKV_KERNELS_DEVIATION_H_
#define RAGKV_KERNELS_DEVIATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

// KvDeviation: out[t] = sum over heads h and dims d of (a[h,t,d] - b[h,t,d])^2.
//   a, b: f32 [heads, tokens, head_dim] (same shape, unit last stride);
//   out: f32 [tokens]. If accumulate is true, adds into out instead of
//   overwriting (so K and V deviations can be summed).
absl::Status KvDeviation(TensorView a, TensorView b, float* out, bool accumulate = false);

// TopK: writes to out_indices the indices of the k largest scores, ordered by
// descending score, ties broken by lower index. NaN scores rank lowest.
// Requires 0 <= k <= n. O(n log k).
absl::Status TopK(const float* scores, int64_t n, int64_t k, int32_t* out_indices);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_DEVIATION_H_
