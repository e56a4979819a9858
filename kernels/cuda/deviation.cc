#include "kernels/cuda/deviation.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/internal/checks.h"
#include "kernels/cuda/internal/cuda_status.h"
#include "kernels/cuda/internal/launch.h"

namespace ragkv::kernels::cuda {

absl::Status KvDeviation(TensorView a, TensorView b, float* out, bool accumulate,
                         CudaStream stream) {
  using internal::AlignedTo;
  if (auto s = internal::CheckKvView(a, "KvDeviation a"); !s.ok()) return s;
  if (auto s = internal::CheckKvView(b, "KvDeviation b"); !s.ok()) return s;
  if (a.dtype != b.dtype || a.shape[0] != b.shape[0] || a.shape[1] != b.shape[1] ||
      a.shape[2] != b.shape[2]) {
    return absl::InvalidArgumentError(absl::StrCat("KvDeviation: mismatched views ",
                                                   a.DebugString(), " vs ", b.DebugString()));
  }
  if (a.shape[1] == 0) return absl::OkStatus();
  if (out == nullptr) return absl::InvalidArgumentError("KvDeviation: null out");
  const int es = static_cast<int>(DTypeSize(a.dtype));
  const int wide = 16 / es;
  const bool vec_ok = AlignedTo(a.data, 16) && AlignedTo(b.data, 16) &&
                      internal::StridesMultipleOf(a, wide) &&
                      internal::StridesMultipleOf(b, wide) && a.shape[2] % wide == 0;
  internal::DeviationLaunch l;
  l.a = a.data;
  l.b = b.data;
  l.elem = internal::ElemCode(a.dtype);
  l.heads = a.shape[0];
  l.tokens = a.shape[1];
  l.head_dim = static_cast<int>(a.shape[2]);
  l.a_stride_head = a.stride[0];
  l.a_stride_token = a.stride[1];
  l.b_stride_head = b.stride[0];
  l.b_stride_token = b.stride[1];
  l.out = out;
  l.accumulate = accumulate;
  l.vec_elems = vec_ok ? wide : 1;
  RAGKV_CUDA_RETURN_IF_ERROR(internal::LaunchKvDeviation(l, stream), "KvDeviation launch");
  return absl::OkStatus();
}

absl::StatusOr<size_t> TopKWorkspaceBytes(int64_t n) {
  if (n < 0 || n > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("TopKWorkspaceBytes: bad n ", n));
  }
  size_t bytes = 0;
  RAGKV_CUDA_RETURN_IF_ERROR(internal::TopKTempBytes(static_cast<int>(n), &bytes),
                             "TopKWorkspaceBytes (CUB size query)");
  return bytes;
}

absl::Status TopK(const float* scores, int64_t n, int64_t k, int32_t* out_indices,
                  void* workspace, size_t workspace_bytes, CudaStream stream) {
  if (n < 0 || n > std::numeric_limits<int32_t>::max() || k < 0 || k > n) {
    return absl::InvalidArgumentError(absl::StrCat("TopK: need 0 <= k <= n < 2^31, got n=", n,
                                                   " k=", k));
  }
  if (k == 0) return absl::OkStatus();
  if (scores == nullptr || out_indices == nullptr || workspace == nullptr) {
    return absl::InvalidArgumentError("TopK: null scores, out_indices or workspace");
  }
  if (!internal::AlignedTo(workspace, 256)) {
    return absl::InvalidArgumentError("TopK: workspace must be 256-byte aligned");
  }
  size_t need = 0;
  RAGKV_CUDA_RETURN_IF_ERROR(internal::TopKTempBytes(static_cast<int>(n), &need),
                             "TopK (CUB size query)");
  if (workspace_bytes < need) {
    return absl::InvalidArgumentError(
        absl::StrCat("TopK: workspace of ", workspace_bytes, " bytes, need ", need));
  }
  RAGKV_CUDA_RETURN_IF_ERROR(
      internal::LaunchTopK(scores, static_cast<int>(n), static_cast<int>(k), out_indices,
                           workspace, workspace_bytes, stream),
      "TopK launch");
  return absl::OkStatus();
}

}  // namespace ragkv::kernels::cuda
