// attention_kernels.cu: selective causal attention with GQA on the GPU.
//
// Work decomposition (shared by both kernels): grid.x = plan work items (a
// tile of up to 64 "query vectors" of one request, a vector being one
// (row, head-in-group) pair), grid.y = kv head. All heads of a GQA group share
// one CTA, so each K/V tile read from memory serves group * rows vectors.
//
// Tensor-core kernel (f16/bf16, head_dim 64/128): flash-style. Q tile
// [64, hd] stays in shared memory; for each 64-key tile K and V are staged in
// shared memory, S = Q K^T on tensor cores (WMMA m16n16k16, f32 accumulate),
// exact per-vector causal limit applied, online softmax in base 2 (f32 row
// max / row sum in shared memory), P rounded to the input type, O += P V on
// tensor cores with f32 accumulator fragments held in registers. Tiles are
// staged with cp.async; V's copy overlaps S = Q K^T and the softmax. When a row
// max grows, the warp's O fragments make one round trip through shared
// memory to be rescaled (the fragment layout is opaque in WMMA). Key tiles
// past the largest causal limit of the tile are skipped.
//
// SIMT kernel (any dtype, head_dim <= 256): one warp per query vector; lanes
// score 32 keys at a time, online softmax in f32, lanes own head dims for the
// P V product. The reference/fallback path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/internal/device_common.cuh"
#include "kernels/cuda/internal/launch.h"

namespace ragkv::kernels::cuda::internal {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBM = kAttnTileVectors;  // query vectors per CTA
constexpr int kBN = 64;                // keys per tile
constexpr int kThreads = 128;          // 4 warps, 16 vectors each
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr size_t Align128(size_t x) { return (x + 127) / 128 * 128; }

// Shared-memory layout of the tensor-core kernel. The O-rescale / epilogue
// scratch ([64][hd+4] f32) aliases the K and S buffers, which are dead
// between the softmax and the next tile's load.
template <int HD>
struct TcSmem {
  static constexpr int kLdQ = HD + 8;   // 16-bit elements
  static constexpr int kLdKV = HD + 8;  // 16-bit elements
  static constexpr int kLdS = kBN + 4;  // f32
  static constexpr int kLdP = kBN + 8;  // 16-bit elements
  static constexpr int kLdO = HD + 4;   // f32
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKOff = kQOff + Align128(size_t{kBM} * kLdQ * 2);
  static constexpr size_t kSOff = kKOff + Align128(size_t{kBN} * kLdKV * 2);
  static constexpr size_t kVOff = kSOff + Align128(size_t{kBM} * kLdS * 4);
  static constexpr size_t kPOff = kVOff + Align128(size_t{kBN} * kLdKV * 2);
  static constexpr size_t kStatsOff = kPOff + Align128(size_t{kBM} * kLdP * 2);
  static constexpr size_t kTotal = kStatsOff + Align128(4 * kBM * 4 + 16);
  static_assert(size_t{kBM} * kLdO * 4 <= kVOff - kKOff, "scratch must fit in K|S");
};

// 16-byte global -> shared copy, asynchronous (sm_80+). pred false: the 16
// bytes are zero-filled and nothing is read from src.
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src, bool pred) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int src_bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Limit (last visible key, request-local) of query vector `vrow` of tile w.
template <bool kBottomRight>
__device__ __forceinline__ int VectorLimit(const AttnLaunch& a, const AttnWorkItem& w, int group,
                                           int vrow) {
  if (vrow >= w.vec_count) return -1;
  const int rl = (w.vec_begin + vrow) / group;
  int limit = kBottomRight ? w.kv_len - w.num_rows + rl : a.positions[w.row_begin + rl];
  return limit < w.kv_len - 1 ? limit : w.kv_len - 1;
}

template <typename T, int HD, bool kBottomRight>
__global__ void __launch_bounds__(kThreads) AttnTcKernel(AttnLaunch a) {
  using L = TcSmem<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem + L::kQOff);
  T* sK = reinterpret_cast<T*>(smem + L::kKOff);
  float* sS = reinterpret_cast<float*>(smem + L::kSOff);
  T* sV = reinterpret_cast<T*>(smem + L::kVOff);
  T* sP = reinterpret_cast<T*>(smem + L::kPOff);
  float* sScratch = reinterpret_cast<float*>(smem + L::kKOff);
  float* sM = reinterpret_cast<float*>(smem + L::kStatsOff);
  float* sL = sM + kBM;
  float* sAlpha = sL + kBM;
  int* sLimit = reinterpret_cast<int*>(sAlpha + kBM);
  int* sMaxLimit = sLimit + kBM;

  const AttnWorkItem w = a.items[blockIdx.x];
  const int kh = blockIdx.y;
  const int group = a.num_heads / a.num_kv_heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row

  if (tid == 0) *sMaxLimit = -1;
  __syncthreads();
  if (tid < kBM) {
    const int limit = VectorLimit<kBottomRight>(a, w, group, tid);
    sLimit[tid] = limit;
    sM[tid] = -INFINITY;
    sL[tid] = 0.f;
    sAlpha[tid] = 1.f;
    atomicMax(sMaxLimit, limit);
  }
  for (int idx = tid; idx < kBM * kChunks; idx += kThreads) {
    const int vrow = idx / kChunks, c = idx % kChunks;
    const T* src = static_cast<const T*>(a.q);  // any valid address when zero-filling
    if (vrow < w.vec_count) {
      const int vec = w.vec_begin + vrow;
      const int rl = vec / group, g = vec % group;
      src += static_cast<int64_t>(w.row_begin + rl) * a.q_stride_row +
             static_cast<int64_t>(kh * group + g) * a.q_stride_head + c * 8;
    }
    CpAsync16(sQ + vrow * L::kLdQ + c * 8, src, vrow < w.vec_count);
  }
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  const int max_limit = *sMaxLimit;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag[HD / 16];
#pragma unroll
  for (int f = 0; f < HD / 16; ++f) wmma::fill_fragment(o_frag[f], 0.f);
  // This warp's 16 query vectors stay in registers for the whole key loop.
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> q_frag[HD / 16];
#pragma unroll
  for (int k = 0; k < HD / 16; ++k) {
    wmma::load_matrix_sync(q_frag[k], sQ + 16 * warp * L::kLdQ + 16 * k, L::kLdQ);
  }

  const float scale_log2 = a.scale * kLog2e;
  const int n_tiles = max_limit < 0 ? 0 : max_limit / kBN + 1;
  const T* kbase = static_cast<const T*>(a.k) + static_cast<int64_t>(kh) * a.k_stride_head +
                   static_cast<int64_t>(w.kv_begin) * a.k_stride_token;
  const T* vbase = static_cast<const T*>(a.v) + static_cast<int64_t>(kh) * a.v_stride_head +
                   static_cast<int64_t>(w.kv_begin) * a.v_stride_token;
  const int r = 16 * warp + (lane >> 1);  // softmax row of this lane
  const int c0 = (lane & 1) * 32;         // its 32 columns
  const int my_limit = sLimit[r];

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int kv0 = tile * kBN;
    __syncthreads();  // the previous tile's P V (sV, sP, scratch) is done
    // K and V tiles by cp.async (all 16-byte copies in flight at once; keys
    // past kv_len zero-filled), K and V in separate groups so that V keeps
    // landing while S = Q K^T and the softmax run.
    for (int idx = tid; idx < kBN * kChunks; idx += kThreads) {
      const int j = idx / kChunks, c = idx % kChunks;
      const bool in = kv0 + j < w.kv_len;
      const int64_t off = in ? static_cast<int64_t>(kv0 + j) * a.k_stride_token + c * 8 : 0;
      CpAsync16(sK + j * L::kLdKV + c * 8, kbase + off, in);
    }
    CpAsyncCommit();
    for (int idx = tid; idx < kBN * kChunks; idx += kThreads) {
      const int j = idx / kChunks, c = idx % kChunks;
      const bool in = kv0 + j < w.kv_len;
      const int64_t off = in ? static_cast<int64_t>(kv0 + j) * a.v_stride_token + c * 8 : 0;
      CpAsync16(sV + j * L::kLdKV + c * 8, vbase + off, in);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();  // this thread's K copies have landed
    __syncthreads();   // ... and everyone's

    // S[16 rows of this warp][64 keys] = Q K^T.
    {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc;
#pragma unroll
      for (int n = 0; n < kBN / 16; ++n) {
        wmma::fill_fragment(sacc, 0.f);
#pragma unroll
        for (int k = 0; k < HD / 16; ++k) {
          wmma::load_matrix_sync(kb, sK + 16 * n * L::kLdKV + 16 * k, L::kLdKV);
          wmma::mma_sync(sacc, q_frag[k], kb, sacc);
        }
        wmma::store_matrix_sync(sS + 16 * warp * L::kLdS + 16 * n, sacc, L::kLdS,
                                wmma::mem_row_major);
      }
    }
    __syncwarp();

    // Online softmax over this tile; two lanes per row, 32 columns each.
    float sv[32];
    float mloc = -INFINITY;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int key = kv0 + c0 + i;
      const float s = key <= my_limit ? sS[r * L::kLdS + c0 + i] * scale_log2 : -INFINITY;
      sv[i] = s;
      mloc = fmaxf(mloc, s);
    }
    mloc = fmaxf(mloc, __shfl_xor_sync(0xffffffffu, mloc, 1));
    const float m_old = sM[r];
    const float m_new = fmaxf(m_old, mloc);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = exp2f(m_old - m_use);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const float p = exp2f(sv[i] - m_use);
      sum += p;
      sP[r * L::kLdP + c0 + i] = FromFloat<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const bool rescale = __any_sync(0xffffffffu, m_old != -INFINITY && alpha != 1.f);
    __syncwarp();
    if ((lane & 1) == 0) {
      sM[r] = m_new;
      sL[r] = sL[r] * alpha + sum;
      sAlpha[r] = alpha;
    }
    CpAsyncWait<0>();  // this thread's V copies have landed
    __syncthreads();   // V visible to all; every warp is done with sK and sS: scratch is free

    if (rescale) {
      float* scr = sScratch + 16 * warp * L::kLdO;
#pragma unroll
      for (int f = 0; f < HD / 16; ++f) {
        wmma::store_matrix_sync(scr + 16 * f, o_frag[f], L::kLdO, wmma::mem_row_major);
      }
      __syncwarp();
      for (int idx = lane; idx < 16 * HD; idx += 32) {
        const int rr = idx / HD, cc = idx % HD;
        scr[rr * L::kLdO + cc] *= sAlpha[16 * warp + rr];
      }
      __syncwarp();
#pragma unroll
      for (int f = 0; f < HD / 16; ++f) {
        wmma::load_matrix_sync(o_frag[f], scr + 16 * f, L::kLdO, wmma::mem_row_major);
      }
    }

    // O[16 rows][HD] += P[16 rows][64] V[64][HD].
    {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
#pragma unroll
      for (int k = 0; k < kBN / 16; ++k) {
        wmma::load_matrix_sync(pa, sP + 16 * warp * L::kLdP + 16 * k, L::kLdP);
#pragma unroll
        for (int f = 0; f < HD / 16; ++f) {
          wmma::load_matrix_sync(vb, sV + 16 * k * L::kLdKV + 16 * f, L::kLdKV);
          wmma::mma_sync(o_frag[f], pa, vb, o_frag[f]);
        }
      }
    }
  }
  __syncthreads();

  // Epilogue: O / l, rounded to T, 16-byte stores; natural-log LSE.
  float* scr = sScratch + 16 * warp * L::kLdO;
#pragma unroll
  for (int f = 0; f < HD / 16; ++f) {
    wmma::store_matrix_sync(scr + 16 * f, o_frag[f], L::kLdO, wmma::mem_row_major);
  }
  __syncwarp();
  for (int idx = lane; idx < 16 * kChunks; idx += 32) {
    const int rr = idx / kChunks, c = idx % kChunks;
    const int vrow = 16 * warp + rr;
    if (vrow >= w.vec_count) continue;
    const float l = sL[vrow];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int vec = w.vec_begin + vrow;
    const int rl = vec / group, g = vec % group;
    T outv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) outv[i] = FromFloat<T>(scr[rr * L::kLdO + c * 8 + i] * inv);
    T* dst = static_cast<T*>(a.out) + static_cast<int64_t>(w.row_begin + rl) * a.o_stride_row +
             static_cast<int64_t>(kh * group + g) * a.o_stride_head + c * 8;
    StoreVec<T, 8>(dst, outv);
  }
  if (a.lse != nullptr && lane < 16) {
    const int vrow = 16 * warp + lane;
    if (vrow < w.vec_count) {
      const int vec = w.vec_begin + vrow;
      const int rl = vec / group, g = vec % group;
      const float l = sL[vrow];
      a.lse[static_cast<int64_t>(w.row_begin + rl) * a.num_heads + kh * group + g] =
          l > 0.f ? (sM[vrow] + log2f(l)) * kLn2 : -INFINITY;
    }
  }
}

// SIMT reference kernel: one warp per query vector.
constexpr int kSimtMaxDimsPerLane = 8;  // head_dim <= 256

template <typename T, bool kBottomRight>
__global__ void __launch_bounds__(kThreads) AttnSimtKernel(AttnLaunch a) {
  __shared__ float sq[kThreads / 32][32 * kSimtMaxDimsPerLane];
  const AttnWorkItem w = a.items[blockIdx.x];
  const int kh = blockIdx.y;
  const int group = a.num_heads / a.num_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd = a.head_dim;
  const float scale_log2 = a.scale * kLog2e;
  const T* kbase = static_cast<const T*>(a.k) + static_cast<int64_t>(kh) * a.k_stride_head +
                   static_cast<int64_t>(w.kv_begin) * a.k_stride_token;
  const T* vbase = static_cast<const T*>(a.v) + static_cast<int64_t>(kh) * a.v_stride_head +
                   static_cast<int64_t>(w.kv_begin) * a.v_stride_token;

  for (int vrow = warp; vrow < w.vec_count; vrow += kThreads / 32) {
    const int vec = w.vec_begin + vrow;
    const int rl = vec / group, g = vec % group;
    const int64_t row = w.row_begin + rl;
    const int head = kh * group + g;
    const int limit = VectorLimit<kBottomRight>(a, w, group, vrow);
    const T* qp = static_cast<const T*>(a.q) + row * a.q_stride_row +
                  static_cast<int64_t>(head) * a.q_stride_head;
    for (int d = lane; d < hd; d += 32) sq[warp][d] = ToFloat(qp[d]) * scale_log2;
    __syncwarp();

    float m = -INFINITY, l = 0.f;
    float o[kSimtMaxDimsPerLane];
#pragma unroll
    for (int i = 0; i < kSimtMaxDimsPerLane; ++i) o[i] = 0.f;
    for (int kv0 = 0; kv0 <= limit; kv0 += 32) {
      const int key = kv0 + lane;
      float s = -INFINITY;
      if (key <= limit) {
        const T* kp = kbase + static_cast<int64_t>(key) * a.k_stride_token;
        float dot = 0.f;
        for (int d = 0; d < hd; ++d) dot = fmaf(sq[warp][d], ToFloat(kp[d]), dot);
        s = dot;
      }
      const float m_new = fmaxf(m, WarpMax(s));  // finite: key kv0 is visible
      const float alpha = exp2f(m - m_new);
      const float p = exp2f(s - m_new);
      l = l * alpha + WarpSum(p);
#pragma unroll
      for (int i = 0; i < kSimtMaxDimsPerLane; ++i) o[i] *= alpha;
      const int nkeys = min(32, limit - kv0 + 1);
      for (int j = 0; j < nkeys; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        const T* vp = vbase + static_cast<int64_t>(kv0 + j) * a.v_stride_token;
#pragma unroll
        for (int i = 0; i < kSimtMaxDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < hd) o[i] = fmaf(pj, ToFloat(vp[d]), o[i]);
        }
      }
      m = m_new;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
    T* op = static_cast<T*>(a.out) + row * a.o_stride_row + static_cast<int64_t>(head) * a.o_stride_head;
#pragma unroll
    for (int i = 0; i < kSimtMaxDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) op[d] = FromFloat<T>(o[i] * inv);
    }
    if (a.lse != nullptr && lane == 0) {
      a.lse[row * a.num_heads + head] = l > 0.f ? (m + log2f(l)) * kLn2 : -INFINITY;
    }
    __syncwarp();
  }
}

template <typename T, int HD, bool kBottomRight>
int LaunchTc(const AttnLaunch& a, Stream stream) {
  const size_t smem = TcSmem<HD>::kTotal;
  auto kernel = AttnTcKernel<T, HD, kBottomRight>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(a.num_items), static_cast<unsigned>(a.num_kv_heads));
  kernel<<<grid, kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, int HD>
int LaunchTcMode(const AttnLaunch& a, Stream stream) {
  return a.bottom_right ? LaunchTc<T, HD, true>(a, stream) : LaunchTc<T, HD, false>(a, stream);
}

template <typename T>
int LaunchTcType(const AttnLaunch& a, Stream stream) {
  switch (a.head_dim) {
    case 64: return LaunchTcMode<T, 64>(a, stream);
    case 128: return LaunchTcMode<T, 128>(a, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
int LaunchSimt(const AttnLaunch& a, Stream stream) {
  const dim3 grid(static_cast<unsigned>(a.num_items), static_cast<unsigned>(a.num_kv_heads));
  if (a.bottom_right) {
    AttnSimtKernel<T, true><<<grid, kThreads, 0, stream>>>(a);
  } else {
    AttnSimtKernel<T, false><<<grid, kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

size_t AttnTensorCoreSmemBytes(int head_dim) {
  switch (head_dim) {
    case 64: return TcSmem<64>::kTotal;
    case 128: return TcSmem<128>::kTotal;
  }
  return 0;
}

int LaunchAttention(const AttnLaunch& a, Stream stream) {
  if (a.num_items == 0) return cudaSuccess;
  if (a.tensor_core) {
    switch (a.elem) {
      case kElemF16: return LaunchTcType<__half>(a, stream);
      case kElemBF16: return LaunchTcType<__nv_bfloat16>(a, stream);
    }
    return cudaErrorInvalidValue;
  }
  switch (a.elem) {
    case kElemF32: return LaunchSimt<float>(a, stream);
    case kElemF16: return LaunchSimt<__half>(a, stream);
    case kElemBF16: return LaunchSimt<__nv_bfloat16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace ragkv::kernels::cuda::internal
