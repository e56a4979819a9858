// cuda_status.h: the one place where cudaError_t becomes absl::Status.
// Private to kernels/cuda.
#ifndef RAGKV_KERNELS_CUDA_INTERNAL_CUDA_STATUS_H_
#define RAGKV_KERNELS_CUDA_INTERNAL_CUDA_STATUS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace ragkv::kernels::cuda::internal {

// CudaStatus: OkStatus for cudaSuccess (0); otherwise a status whose message
// is "<what>: <cudaGetErrorName>: <cudaGetErrorString>". Codes:
// cudaErrorMemoryAllocation -> ResourceExhausted; cudaErrorInvalidValue,
// cudaErrorInvalidConfiguration, cudaErrorInvalidPitchValue -> InvalidArgument;
// no device / insufficient or missing driver / unsupported PTX or arch ->
// Unavailable; everything else (launch failures, illegal addresses) -> Internal.
absl::Status CudaStatus(int cuda_error, absl::string_view what);

}  // namespace ragkv::kernels::cuda::internal

// CUDA_RETURN_IF_ERROR(call, what): evaluates a CUDA runtime call (or a
// launcher returning its error code) and returns the translated status.
#define RAGKV_CUDA_RETURN_IF_ERROR(call, what)                                    \
  do {                                                                           \
    const int ragkv_cuda_err_ = static_cast<int>(call);                          \
    if (ragkv_cuda_err_ != 0)                                                    \
      return ::ragkv::kernels::cuda::internal::CudaStatus(ragkv_cuda_err_, what); \
  } while (0)

#endif  // RAGKV_KERNELS_CUDA_INTERNAL_CUDA_STATUS_H_
