// memory_kernels.cu: the bandwidth-bound kernels of the blend path: RoPE
// re-rotation by per-chunk deltas, per-token KV deviation, and row gather /
// scatter between the flat KV layout and a paged (vLLM) KV cache.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/internal/device_common.cuh"
#include "kernels/cuda/internal/launch.h"

namespace ragkv::kernels::cuda::internal {
namespace {

constexpr int kMaxRopePairs = 256;  // head_dim <= 512

// ------------------------------------------------------------------ RoPE ----
// One thread per (token, vector of VEC elements) of the first head; it computes
// the rotation angles once and applies them to that vector in every head.
// Angles: delta * theta^(-2j/head_dim) in double, reduced mod 2*pi in double,
// then sin/cos in f32 (accurate for any |delta| the int32 range allows).
template <typename T, int VEC, bool kHalfSplit>
__global__ void __launch_bounds__(256) RerotateKernel(RerotateLaunch a) {
  __shared__ double inv_freq[kMaxRopePairs];
  const int pairs = a.head_dim / 2;
  const double log2_theta = log2(a.theta);
  for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
    inv_freq[j] = exp2(-(2.0 * j / a.head_dim) * log2_theta);
  }
  __syncthreads();

  const int vecs_per_token = kHalfSplit ? pairs / VEC : a.head_dim / VEC;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid >= a.tokens * vecs_per_token) return;
  const int64_t t = gid / vecs_per_token;
  const int vi = static_cast<int>(gid % vecs_per_token);

  // Chunk of token t: last c with offsets[c] <= t (offsets ascending).
  if (t < a.chunk_offsets[0] || t >= a.chunk_offsets[a.num_chunks]) return;
  int lo = 0, hi = a.num_chunks;  // invariant: offsets[lo] <= t < offsets[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (a.chunk_offsets[mid] <= t) lo = mid; else hi = mid;
  }
  const double delta = static_cast<double>(a.deltas[lo]);
  if (delta == 0.0) return;

  constexpr int kPairs = kHalfSplit ? VEC : VEC / 2;
  const int e0 = vi * VEC;
  const int j0 = kHalfSplit ? e0 : e0 / 2;
  float cs[kPairs], sn[kPairs];
  constexpr double kTwoPi = 6.283185307179586476925286766559;
#pragma unroll
  for (int p = 0; p < kPairs; ++p) {
    double ang = delta * inv_freq[j0 + p];
    ang -= rint(ang * (1.0 / kTwoPi)) * kTwoPi;
    sincosf(static_cast<float>(ang), &sn[p], &cs[p]);
  }

  T* base = static_cast<T*>(a.data) + t * a.stride_token + e0;
  for (int64_t h = 0; h < a.heads; ++h) {
    T* p0 = base + h * a.stride_head;
    if constexpr (kHalfSplit) {
      T* p1 = p0 + pairs;
      T x0[VEC], x1[VEC];
      LoadVec<T, VEC>(p0, x0);
      LoadVec<T, VEC>(p1, x1);
#pragma unroll
      for (int p = 0; p < VEC; ++p) {
        const float u = ToFloat(x0[p]), w = ToFloat(x1[p]);
        x0[p] = FromFloat<T>(u * cs[p] - w * sn[p]);
        x1[p] = FromFloat<T>(u * sn[p] + w * cs[p]);
      }
      StoreVec<T, VEC>(p0, x0);
      StoreVec<T, VEC>(p1, x1);
    } else {
      T x[VEC];
      LoadVec<T, VEC>(p0, x);
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        const float u = ToFloat(x[2 * p]), w = ToFloat(x[2 * p + 1]);
        x[2 * p] = FromFloat<T>(u * cs[p] - w * sn[p]);
        x[2 * p + 1] = FromFloat<T>(u * sn[p] + w * cs[p]);
      }
      StoreVec<T, VEC>(p0, x);
    }
  }
}

template <typename T, int VEC>
int LaunchRerotateT(const RerotateLaunch& a, Stream stream) {
  const int pairs = a.head_dim / 2;
  const int64_t vpt = a.half_split ? pairs / VEC : a.head_dim / VEC;
  const int64_t threads = a.tokens * vpt;
  if (threads == 0) return cudaSuccess;
  const int block = 256;
  const int64_t grid = (threads + block - 1) / block;
  if (a.half_split) {
    RerotateKernel<T, VEC, true><<<static_cast<unsigned>(grid), block, 0, stream>>>(a);
  } else {
    RerotateKernel<T, VEC, false><<<static_cast<unsigned>(grid), block, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <typename T>
int LaunchRerotateDispatch(const RerotateLaunch& a, Stream stream) {
  constexpr int kWide = 16 / static_cast<int>(sizeof(T));
  if (a.vec_elems == kWide) return LaunchRerotateT<T, kWide>(a, stream);
  return LaunchRerotateT<T, 2>(a, stream);
}

// ------------------------------------------------------------- Deviation ----
// One warp per token; lanes stride over (head, vector) pairs.
template <typename T, int VEC>
__global__ void __launch_bounds__(256) DeviationKernel(DeviationLaunch a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  if (t >= a.tokens) return;
  const int vecs = a.head_dim / VEC;
  const int64_t total = a.heads * vecs;
  const T* pa = static_cast<const T*>(a.a) + t * a.a_stride_token;
  const T* pb = static_cast<const T*>(a.b) + t * a.b_stride_token;
  float acc = 0.f;
  for (int64_t e = lane; e < total; e += 32) {
    const int64_t h = e / vecs;
    const int d = static_cast<int>(e % vecs) * VEC;
    T xa[VEC], xb[VEC];
    LoadVec<T, VEC>(pa + h * a.a_stride_head + d, xa);
    LoadVec<T, VEC>(pb + h * a.b_stride_head + d, xb);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float diff = ToFloat(xa[i]) - ToFloat(xb[i]);
      acc = fmaf(diff, diff, acc);
    }
  }
  acc = WarpSum(acc);
  if (lane == 0) a.out[t] = a.accumulate ? a.out[t] + acc : acc;
}

template <typename T>
int LaunchDeviationT(const DeviationLaunch& a, Stream stream) {
  if (a.tokens == 0) return cudaSuccess;
  const int block = 256;
  const int64_t grid = (a.tokens + 7) / 8;
  constexpr int kWide = 16 / static_cast<int>(sizeof(T));
  if (a.vec_elems == kWide) {
    DeviationKernel<T, kWide><<<static_cast<unsigned>(grid), block, 0, stream>>>(a);
  } else {
    DeviationKernel<T, 1><<<static_cast<unsigned>(grid), block, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

// -------------------------------------------------------------- Paged KV ----
// One thread per copy unit of (row i, K or V, head h, unit u), u fastest.
template <typename U>
__global__ void __launch_bounds__(256) PagedCopyKernel(PagedCopyLaunch a) {
  const int unit_elems = static_cast<int>(sizeof(U)) / a.elem_bytes;
  const int units = a.head_dim / unit_elems;
  const int64_t per_row = 2LL * a.kv_heads * units;
  const int64_t total = a.n * per_row;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / per_row;
    int64_t rem = idx % per_row;
    const int which = static_cast<int>(rem / (static_cast<int64_t>(a.kv_heads) * units));
    rem %= static_cast<int64_t>(a.kv_heads) * units;
    const int64_t h = rem / units;
    const int u = static_cast<int>(rem % units);

    const int32_t row = a.flat_rows[i];
    const int32_t seq = a.seq_ids != nullptr ? a.seq_ids[i] : 0;
    const int32_t pos = a.positions[i];
    bool ok = row >= 0 && row < a.flat_tokens && seq >= 0 && seq < a.num_seqs && pos >= 0 &&
              pos / a.block_size < a.max_blocks_per_seq;
    int64_t block = -1;
    if (ok) {
      block = a.block_table[static_cast<int64_t>(seq) * a.max_blocks_per_seq + pos / a.block_size];
      ok = block >= 0 && block < a.num_blocks;
    }
    if (!ok) {
      if (which == 0 && h == 0 && u == 0 && a.invalid_count != nullptr) {
        atomicAdd(a.invalid_count, 1);
      }
      continue;
    }
    const int64_t slot = pos % a.block_size;
    const int64_t e = static_cast<int64_t>(u) * unit_elems;
    char* flat = static_cast<char*>(which == 0 ? a.k_flat : a.v_flat);
    const int64_t fsh = which == 0 ? a.k_flat_stride_head : a.v_flat_stride_head;
    const int64_t fst = which == 0 ? a.k_flat_stride_token : a.v_flat_stride_token;
    char* cache = static_cast<char*>(which == 0 ? a.k_cache : a.v_cache);
    U* fp = reinterpret_cast<U*>(flat + (h * fsh + row * fst + e) * a.elem_bytes);
    U* cp = reinterpret_cast<U*>(
        cache + (block * a.cache_stride_block + slot * a.cache_stride_slot +
                 h * a.cache_stride_head + e) * a.elem_bytes);
    if (a.to_paged) *cp = *fp; else *fp = *cp;
  }
}

template <typename U>
int LaunchPagedCopyT(const PagedCopyLaunch& a, Stream stream) {
  const int unit_elems = static_cast<int>(sizeof(U)) / a.elem_bytes;
  const int64_t total = a.n * 2LL * a.kv_heads * (a.head_dim / unit_elems);
  if (total == 0) return cudaSuccess;
  const int block = 256;
  int64_t grid = (total + block - 1) / block;
  if (grid > 65535LL * 16) grid = 65535LL * 16;
  PagedCopyKernel<U><<<static_cast<unsigned>(grid), block, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

int LaunchRerotate(const RerotateLaunch& a, Stream stream) {
  switch (a.elem) {
    case kElemF32: return LaunchRerotateDispatch<float>(a, stream);
    case kElemF16: return LaunchRerotateDispatch<__half>(a, stream);
    case kElemBF16: return LaunchRerotateDispatch<__nv_bfloat16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

int LaunchKvDeviation(const DeviationLaunch& a, Stream stream) {
  switch (a.elem) {
    case kElemF32: return LaunchDeviationT<float>(a, stream);
    case kElemF16: return LaunchDeviationT<__half>(a, stream);
    case kElemBF16: return LaunchDeviationT<__nv_bfloat16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

int LaunchPagedCopy(const PagedCopyLaunch& a, Stream stream) {
  switch (a.unit_bytes) {
    case 16: return LaunchPagedCopyT<uint4>(a, stream);
    case 8: return LaunchPagedCopyT<uint2>(a, stream);
    case 4: return LaunchPagedCopyT<unsigned int>(a, stream);
    case 2: return LaunchPagedCopyT<unsigned short>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace ragkv::kernels::cuda::internal
