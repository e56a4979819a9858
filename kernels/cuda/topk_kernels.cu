// topk_kernels.cu: top-k selection over f32 scores with CUB's radix sort.
//
// Scores are mapped to order-preserving uint32 keys (NaN -> 0, below every
// number; -0 -> +0 so that zeros tie), paired with their indices and sorted
// descending by a stable radix sort, so equal scores keep ascending index
// order: exactly the CPU twin's order (descending score, ties by lower
// index, NaN last). The first k values of the sorted index array are copied
// out.
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/internal/launch.h"

namespace ragkv::kernels::cuda::internal {
namespace {

constexpr size_t kAlign = 256;
size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

__global__ void MakeKeysKernel(const float* scores, int n, uint32_t* keys, int32_t* values) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float f = scores[i];
  uint32_t key;
  if (isnan(f)) {
    key = 0u;
  } else {
    if (f == 0.f) f = 0.f;  // -0 -> +0
    const uint32_t bits = __float_as_uint(f);
    key = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    // Finite/inf numbers map to >= ~0xff800000 = 0x007fffff > 0.
  }
  keys[i] = key;
  values[i] = i;
}

struct Layout {
  size_t keys_in, keys_out, vals_in, vals_out, temp, temp_bytes, total;
};

int ComputeLayout(int n, Layout* l) {
  size_t temp_bytes = 0;
  cudaError_t e = cub::DeviceRadixSort::SortPairsDescending(
      nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n);
  if (e != cudaSuccess) return e;
  const size_t arr = AlignUp(static_cast<size_t>(n) * 4);
  l->keys_in = 0;
  l->keys_out = arr;
  l->vals_in = 2 * arr;
  l->vals_out = 3 * arr;
  l->temp = 4 * arr;
  l->temp_bytes = temp_bytes;
  l->total = 4 * arr + AlignUp(temp_bytes);
  return cudaSuccess;
}

}  // namespace

int TopKTempBytes(int n, size_t* bytes) {
  Layout l;
  const int e = ComputeLayout(n, &l);
  if (e == cudaSuccess) *bytes = l.total;
  return e;
}

int LaunchTopK(const float* scores, int n, int k, int32_t* out_indices, void* workspace,
               size_t workspace_bytes, Stream stream) {
  if (n == 0 || k == 0) return cudaSuccess;
  Layout l;
  int e = ComputeLayout(n, &l);
  if (e != cudaSuccess) return e;
  if (workspace_bytes < l.total) return cudaErrorInvalidValue;
  char* ws = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<uint32_t*>(ws + l.keys_in);
  auto* keys_out = reinterpret_cast<uint32_t*>(ws + l.keys_out);
  auto* vals_in = reinterpret_cast<int32_t*>(ws + l.vals_in);
  auto* vals_out = reinterpret_cast<int32_t*>(ws + l.vals_out);
  const int block = 256;
  MakeKeysKernel<<<(n + block - 1) / block, block, 0, stream>>>(scores, n, keys_in, vals_in);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  size_t temp_bytes = l.temp_bytes;
  e = cub::DeviceRadixSort::SortPairsDescending(ws + l.temp, temp_bytes, keys_in, keys_out,
                                                vals_in, vals_out, n, 0, 32, stream);
  if (e != cudaSuccess) return e;
  return cudaMemcpyAsync(out_indices, vals_out, static_cast<size_t>(k) * sizeof(int32_t),
                         cudaMemcpyDeviceToDevice, stream);
}

}  // namespace ragkv::kernels::cuda::internal
