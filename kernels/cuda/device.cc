#include "kernels/cuda/device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/internal/cuda_status.h"

namespace ragkv::kernels::cuda {

absl::Status CudaAvailable() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", cudaGetErrorString(e)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: device count is 0");
  return absl::OkStatus();
}

absl::StatusOr<DeviceInfo> QueryDevice(int device) {
  if (device < 0) RAGKV_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  RAGKV_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.device = device;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.global_mem_bytes = prop.totalGlobalMem;
  info.l2_cache_bytes = prop.l2CacheSize;
  info.max_smem_per_block_optin_bytes = prop.sharedMemPerBlockOptin;
  return info;
}

}  // namespace ragkv::kernels::cuda
