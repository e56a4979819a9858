#include "kernels/cuda/internal/cuda_status.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace ragkv::kernels::cuda::internal {

absl::Status CudaStatus(int cuda_error, absl::string_view what) {
  if (cuda_error == 0) return absl::OkStatus();
  const auto e = static_cast<cudaError_t>(cuda_error);
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidPitchValue:
      return absl::InvalidArgumentError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace ragkv::kernels::cuda::internal
