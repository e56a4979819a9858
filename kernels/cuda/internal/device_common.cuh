// device_common.cuh: device-side helpers shared by the kernels/cuda .cu files
// (element conversion, raw vector loads). Private to kernels/cuda; nvcc only.
#ifndef RAGKV_KERNELS_CUDA_INTERNAL_DEVICE_COMMON_CUH_
#define RAGKV_KERNELS_CUDA_INTERNAL_DEVICE_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv::kernels::cuda::internal {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// RawVec<BYTES>::type: an unsigned integer (vector) type of BYTES bytes, for
// one aligned memory transaction per thread.
template <int BYTES>
struct RawVec;
template <>
struct RawVec<16> { using type = uint4; };
template <>
struct RawVec<8> { using type = uint2; };
template <>
struct RawVec<4> { using type = unsigned int; };
template <>
struct RawVec<2> { using type = unsigned short; };

// LoadVec / StoreVec: N elements of T at p (aligned to N * sizeof(T)).
template <typename T, int N>
__device__ __forceinline__ void LoadVec(const T* p, T (&out)[N]) {
  using V = typename RawVec<N * sizeof(T)>::type;
  V raw = *reinterpret_cast<const V*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = e[i];
}
template <typename T, int N>
__device__ __forceinline__ void StoreVec(T* p, const T (&in)[N]) {
  using V = typename RawVec<N * sizeof(T)>::type;
  V raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < N; ++i) e[i] = in[i];
  *reinterpret_cast<V*>(p) = raw;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace ragkv::kernels::cuda::internal

#endif  // RAGKV_KERNELS_CUDA_INTERNAL_DEVICE_COMMON_CUH_
