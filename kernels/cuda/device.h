// device.h: the CUDA vocabulary of ragkv::kernels::cuda: the stream handle,
// device discovery, and the conventions every kernel in kernels/cuda/ follows.
//
// Conventions (all of kernels/cuda/*.h):
//  - Tensors are kernels::TensorView values whose `data` is DEVICE memory
//    (cudaMalloc or equivalent); strides in elements; nothing is owned.
//  - Every entry point takes an explicit stream, enqueues work on it and
//    returns without synchronizing; results are valid once the stream is.
//  - No entry point allocates device memory: scratch space is a caller-owned
//    workspace whose size a *WorkspaceBytes() / plan method states.
//  - Errors: InvalidArgument for bad shapes/dtypes/alignment (checked on the
//    host before anything is enqueued); CUDA errors are translated in one
//    place (Unavailable: no device/driver/kernel image; ResourceExhausted:
//    out of memory; Internal: launch failures). Asynchronous kernel faults
//    surface at the caller's next synchronization, not here.
//  - Thread safety: all functions are reentrant; concurrent calls on
//    different streams are fine if their outputs do not overlap.
// Each kernel has a CPU twin in kernels/*.h that is its test oracle.
#ifndef RAGKV_KERNELS_CUDA_DEVICE_H_
#define RAGKV_KERNELS_CUDA_DEVICE_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Same type as cudaStream_t (typedef struct CUstream_st* cudaStream_t), so
// callers pass their cudaStream_t directly; this header needs no CUDA headers.
struct CUstream_st;

namespace ragkv::kernels::cuda {

using CudaStream = CUstream_st*;  // nullptr = the legacy default stream

struct DeviceInfo {
  int device = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  size_t global_mem_bytes = 0;
  int l2_cache_bytes = 0;
  size_t max_smem_per_block_optin_bytes = 0;
};

// CudaAvailable: OK when at least one CUDA device is usable; otherwise
// Unavailable("no CUDA device: <CUDA error string>"). Cheap after the first
// call (the runtime caches its initialisation).
absl::Status CudaAvailable();

// QueryDevice: properties of `device` (-1: the calling thread's current device).
absl::StatusOr<DeviceInfo> QueryDevice(int device = -1);

}  // namespace ragkv::kernels::cuda

#endif  // RAGKV_KERNELS_CUDA_DEVICE_H_
