// attention_kernels.cu: selective causal attention with GQA on the GPU.
//
// Work decomposition (shared by both kernels): one CTA per (plan work item,
// kv head), a work item being a tile of up to 128 "query vectors" of one
// request, a vector being one (row, head-in-group) pair. SIMT: grid.x = item,
// grid.y = kv head; tensor cores: a flat item-major grid (all kv heads of the
// heaviest items first). All heads of a GQA group share one CTA, so each K/V
// tile read from memory serves group * rows vectors.
//
// Tensor-core kernel (f16/bf16, head_dim 64/128), FlashAttention-2 style:
// 4 warps x 32 query vectors per CTA, each warp keeping its O accumulators
// and its row max / row sums (and at head_dim 64 its Q fragments) in
// registers for the whole key loop (raw mma.sync m16n8k16 PTX, whose
// fragment layout is known, so the online-softmax rescale happens in
// registers). 32-key K/V tiles are double-buffered in shared memory by
// cp.async and read by ldmatrix; S = Q K^T
// on tensor cores (f32 accumulate), exact per-vector causal limit, online
// softmax in base 2, P rounded to the input type in registers and fed
// straight into O += P V. Key tiles past the largest causal limit of the CTA
// are not loaded; a warp skips the tiles past its own rows' limits.
//
// SIMT kernel (any dtype, head_dim <= 256): one warp per query vector; lanes
// score 32 keys at a time, online softmax in f32, lanes own head dims for the
// P V product. The reference/fallback path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/internal/device_common.cuh"
#include "kernels/cuda/internal/launch.h"

namespace ragkv::kernels::cuda::internal {
namespace {

constexpr int kSimtThreads = 256;  // SIMT kernel: 8 warps, one query vector each at a time
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Configuration and shared-memory layout of the tensor-core kernel. Each
// warp owns MT blocks of 16 query vectors (so every K/V fragment read from
// shared memory feeds MT mma's); the CTA's BM vectors take kWarps warps;
// a key tile has BN keys. Two pipeline stages, each a K tile and a V tile of
// [BN][HD] (rows padded by 16 bytes, so the 8 row addresses of every
// ldmatrix hit distinct bank groups; stage s = K at KOff(s), V right after
// it), then the Q tile [BM][HD], which the epilogue reuses to stage the
// output tile.
template <int HD, int BM, int MT, int BN, bool QR>
struct TcCfg {
  static constexpr int kHD = HD, kBM = BM, kMT = MT;
  static constexpr bool kQInRegs = QR;
  static constexpr int kWarps = BM / (16 * MT);
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kTileKeys = BN;
  static constexpr int kLd = HD + 8;  // 16-bit elements per row
  static constexpr size_t kTileBytes = size_t{BN} * kLd * 2;
  __host__ __device__ static constexpr size_t KOff(int stage) { return 2 * kTileBytes * stage; }
  __host__ __device__ static constexpr size_t VOff(int stage) { return KOff(stage) + kTileBytes; }
  static constexpr size_t kQOff = KOff(2);
  static constexpr size_t kTotal = kQOff + size_t{BM} * kLd * 2;
  static_assert(BM % (16 * MT) == 0 && BN % 16 == 0, "tile shapes");
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

// ldmatrix: four 8x8 16-bit matrices; lanes 8i..8i+7 give the row addresses
// of matrix i, register i receives matrix i (thread t: row t/4, columns
// 2(t%4), 2(t%4)+1; .trans: the transpose).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem_row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem_row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// D = A B + D, m16n8k16, f32 accumulate. Fragments (g = lane/4, t = lane%4):
// A regs {(g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)} of a row-major
// 16x16 tile; B regs {(k 2t.., n g), (k 2t+8.., n g)}; C/D {(g, 2t), (g, 2t+1),
// (g+8, 2t), (g+8, 2t+1)}.
template <typename T>
__device__ __forceinline__ void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1);
template <>
__device__ __forceinline__ void Mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to T, packed (lo in the low half) as one mma operand register.
template <typename T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t PackPair<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t PackPair<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// 2^x (MUFU.EX2; results below 2^-126 flush to 0, which P and alpha can
// afford).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
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

// Tensor-core kernel, FlashAttention-2 style: warp w owns query vectors
// 16*MT*w .. 16*MT*(w+1)-1 of the tile; their O accumulators (16*MT x HD
// f32), row max and partial row sums stay in registers for the whole key
// loop, and so do their Q fragments when kQInRegs (else they are re-read
// from shared memory per tile). Per key tile: S = Q K^T (mma.sync
// m16n8k16, K fragments by ldmatrix, each used by MT mma's), per-vector
// causal mask, online softmax in base 2 on the S accumulators, O rescaled in
// registers, P rounded to T and fed from the S accumulators straight into
// O += P V as A fragments (the C layout of two n8 tiles is the A layout of
// one k16 step), V fragments by ldmatrix.trans. K/V tiles are
// double-buffered: tile i+1 is fetched by cp.async while tile i is computed.
//
// Why this is one ~300-line function: it is a single fused, register-resident
// kernel. The O accumulators, the running row max / row sums and (kQInRegs)
// the Q fragments are register arrays, indexed by compile-time constants,
// that stay live across the whole key loop, and P goes from the S
// accumulators into O += P V without leaving registers. Cutting it into
// __device__ functions would not shorten the hot loop (they would all be
// inlined back into it), and passing those arrays across calls risks
// demoting them to local memory (spills). Keep it whole.
template <typename T, typename C, bool kBottomRight>
__global__ void __launch_bounds__(C::kThreads, 256 / C::kThreads) AttnTcKernel(AttnLaunch a) {
  constexpr int MT = C::kMT;
  constexpr bool kQInRegs = C::kQInRegs;
  constexpr int HD = C::kHD;
  constexpr int kBM = C::kBM;
  constexpr int kThr = C::kThreads;
  constexpr int kBN = C::kTileKeys;
  constexpr int kLd = C::kLd;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  constexpr int kNT = kBN / 8;     // n8 tiles of S
  constexpr int kDT = HD / 8;      // n8 tiles of O
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_warp_max[C::kWarps];

  int item, kh;
  if (gridDim.y == 1) {  // flat grid: item-major, every kv head of an item adjacent
    item = static_cast<int>(blockIdx.x) / a.num_kv_heads;
    kh = static_cast<int>(blockIdx.x) % a.num_kv_heads;
  } else {
    item = blockIdx.x;
    kh = blockIdx.y;
  }
  const AttnWorkItem w = a.items[item];
  const int group = a.num_heads / a.num_kv_heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane >> 2, t4 = lane & 3;
  const int wrow0 = 16 * MT * warp;  // first vector row of this warp

  const T* kbase = static_cast<const T*>(a.k) + static_cast<int64_t>(kh) * a.k_stride_head +
                   static_cast<int64_t>(w.kv_begin) * a.k_stride_token;
  const T* vbase = static_cast<const T*>(a.v) + static_cast<int64_t>(kh) * a.v_stride_head +
                   static_cast<int64_t>(w.kv_begin) * a.v_stride_token;
  // Stage one K/V tile (keys past kv_len zero-filled) into `stage`.
  auto load_kv = [&](int tile, int stage) {
    const int kv0 = tile * kBN;
    T* sK = reinterpret_cast<T*>(smem + C::KOff(stage));
    T* sV = reinterpret_cast<T*>(smem + C::VOff(stage));
#pragma unroll
    for (int idx = tid; idx < kBN * kChunks; idx += kThr) {
      const int j = idx / kChunks, c = idx % kChunks;
      const bool in = kv0 + j < w.kv_len;
      const int64_t ko = in ? static_cast<int64_t>(kv0 + j) * a.k_stride_token + c * 8 : 0;
      const int64_t vo = in ? static_cast<int64_t>(kv0 + j) * a.v_stride_token + c * 8 : 0;
      CpAsync16(sK + j * kLd + c * 8, kbase + ko, in);
      CpAsync16(sV + j * kLd + c * 8, vbase + vo, in);
    }
  };

  // Q tile (rows past vec_count zero-filled) and the first K/V tile.
  T* sQ = reinterpret_cast<T*>(smem + C::kQOff);
#pragma unroll
  for (int idx = tid; idx < kBM * kChunks; idx += kThr) {
    const int vrow = idx / kChunks, c = idx % kChunks;
    const T* src = static_cast<const T*>(a.q);  // any valid address when zero-filling
    if (vrow < w.vec_count) {
      const int vec = w.vec_begin + vrow;
      const int rl = vec / group, gh = vec % group;
      src += static_cast<int64_t>(w.row_begin + rl) * a.q_stride_row +
             static_cast<int64_t>(kh * group + gh) * a.q_stride_head + c * 8;
    }
    CpAsync16(sQ + vrow * kLd + c * 8, src, vrow < w.vec_count);
  }
  load_kv(0, 0);
  CpAsyncCommit();

  // Causal limits of this thread's rows: [m][0] row 16m+g, [m][1] row 16m+g+8.
  int lim[MT][2];
  int warp_max = -1, warp_min = 0x7fffffff;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lim[m][h] = VectorLimit<kBottomRight>(a, w, group, wrow0 + 16 * m + g + 8 * h);
      warp_max = max(warp_max, lim[m][h]);
      warp_min = min(warp_min, lim[m][h]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    warp_max = max(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, o));
    warp_min = min(warp_min, __shfl_xor_sync(0xffffffffu, warp_min, o));
  }
  if (lane == 0) s_warp_max[warp] = warp_max;

  CpAsyncWait<0>();
  __syncthreads();
  int cta_max = s_warp_max[0];
#pragma unroll
  for (int i = 1; i < C::kWarps; ++i) cta_max = max(cta_max, s_warp_max[i]);
  const int n_tiles = cta_max < 0 ? 0 : cta_max / kBN + 1;

  // Q fragments (A operand): m16 block m, k16 step k -> 4 registers.
  const T* q_lane = sQ + (wrow0 + (lane & 15)) * kLd + (lane >> 4) * 8;
  uint32_t qf[kQInRegs ? MT : 1][kQInRegs ? HD / 16 : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int k = 0; k < HD / 16; ++k) LdMatrixX4(qf[m][k], q_lane + 16 * m * kLd + 16 * k);
  }

  float o[MT][kDT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < kDT; ++j) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.f;
  float mrun[MT][2], lrun[MT][2];  // running max (scaled, base 2); partial row sums
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    mrun[m][0] = mrun[m][1] = -INFINITY;
    lrun[m][0] = lrun[m][1] = 0.f;
  }
  const float scale_log2 = a.scale * kLog2e;

  // ldmatrix lane offsets (elements) within a stage's K / V tile.
  const int k_lane_off = ((lane & 7) + ((lane >> 4) << 3)) * kLd + ((lane >> 3) & 1) * 8;
  const int v_lane_off = ((lane & 7) + (((lane >> 3) & 1) << 3)) * kLd + (lane >> 4) * 8;

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int stage = tile & 1;
    // One barrier per tile: after it, `tile` has landed (every thread waited
    // for its own copies) and every warp is done with tile-1, whose stage is
    // then refilled with tile+1 while this tile is computed.
    CpAsyncWait<0>();
    __syncthreads();
    if (tile + 1 < n_tiles) {
      load_kv(tile + 1, stage ^ 1);
      CpAsyncCommit();
    }

    const int kv0 = tile * kBN;
    if (kv0 > warp_max) continue;  // no row of this warp sees these keys
    const T* sK = reinterpret_cast<const T*>(smem + C::KOff(stage));
    const T* sV = reinterpret_cast<const T*>(smem + C::VOff(stage));

    // S[16 MT][kBN] = Q K^T.
    float s[MT][kNT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int j = 0; j < kNT; ++j) s[m][j][0] = s[m][j][1] = s[m][j][2] = s[m][j][3] = 0.f;
#pragma unroll
    for (int k = 0; k < HD / 16; ++k) {
      uint32_t qk[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int r = 0; r < 4; ++r) qk[m][r] = qf[m][k][r];
        } else {
          LdMatrixX4(qk[m], q_lane + 16 * m * kLd + 16 * k);
        }
      }
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];
        LdMatrixX4(b, sK + 16 * np * kLd + 16 * k + k_lane_off);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          Mma16816<T>(s[m][2 * np], qk[m], b[0], b[1]);
          Mma16816<T>(s[m][2 * np + 1], qk[m], b[2], b[3]);
        }
      }
    }

    // Exact per-vector causal mask, only on tiles that cross a limit.
    if (kv0 + kBN - 1 > warp_min) {
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          const int key = kv0 + 8 * j + 2 * t4;
          if (key > lim[m][0]) s[m][j][0] = -INFINITY;
          if (key + 1 > lim[m][0]) s[m][j][1] = -INFINITY;
          if (key > lim[m][1]) s[m][j][2] = -INFINITY;
          if (key + 1 > lim[m][1]) s[m][j][3] = -INFINITY;
        }
    }

    // Online softmax (base 2, scale folded in); a row lives in one quad.
    uint32_t pf[MT][kBN / 16][4];  // P as A fragments, one per k16 step of O += P V
    float alpha[MT][2];
    bool moved = false;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        mx0 = fmaxf(mx0, fmaxf(s[m][j][0], s[m][j][1]));
        mx1 = fmaxf(mx1, fmaxf(s[m][j][2], s[m][j][3]));
      }
#pragma unroll
      for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
      }
      const float mn0 = fmaxf(mrun[m][0], mx0 * scale_log2);
      const float mn1 = fmaxf(mrun[m][1], mx1 * scale_log2);
      const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
      const bool moved0 = mn0 != mrun[m][0], moved1 = mn1 != mrun[m][1];
      const float alpha0 = moved0 ? Exp2(mrun[m][0] - mu0) : 1.f;
      const float alpha1 = moved1 ? Exp2(mrun[m][1] - mu1) : 1.f;
      moved |= moved0 || moved1;
      mrun[m][0] = mn0;
      mrun[m][1] = mn1;
      float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const float p0 = Exp2(fmaf(s[m][j][0], scale_log2, -mu0));
        const float p1 = Exp2(fmaf(s[m][j][1], scale_log2, -mu0));
        const float p2 = Exp2(fmaf(s[m][j][2], scale_log2, -mu1));
        const float p3 = Exp2(fmaf(s[m][j][3], scale_log2, -mu1));
        sum0 += p0 + p1;
        sum1 += p2 + p3;
        pf[m][j / 2][(j & 1) * 2 + 0] = PackPair<T>(p0, p1);
        pf[m][j / 2][(j & 1) * 2 + 1] = PackPair<T>(p2, p3);
      }
      lrun[m][0] = lrun[m][0] * alpha0 + sum0;
      lrun[m][1] = lrun[m][1] * alpha1 + sum1;
      alpha[m][0] = alpha0;
      alpha[m][1] = alpha1;
    }
    // Rescale O only when some row max of the warp moved (after the first
    // tiles it rarely does; an unmoved row's alpha is exactly 1).
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < kDT; ++j) {
          o[m][j][0] *= alpha[m][0];
          o[m][j][1] *= alpha[m][0];
          o[m][j][2] *= alpha[m][1];
          o[m][j][3] *= alpha[m][1];
        }
    }

    // O[16 MT][HD] += P[16 MT][kBN] V[kBN][HD].
#pragma unroll
    for (int k = 0; k < kBN / 16; ++k) {
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t b[4];
        LdMatrixX4Trans(b, sV + 16 * k * kLd + 16 * dp + v_lane_off);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          Mma16816<T>(o[m][2 * dp], pf[m][k], b[0], b[1]);
          Mma16816<T>(o[m][2 * dp + 1], pf[m][k], b[2], b[3]);
        }
      }
    }
  }

  // Epilogue: full row sums, O / l rounded to T and staged in shared memory
  // (the Q tile's place; every warp is past the key loop), then 16-byte
  // stores; natural-log LSE.
  __syncthreads();
  T* sO = sQ;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = lrun[m][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      lrun[m][h] = l;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      T* row = sO + (wrow0 + 16 * m + g + 8 * h) * kLd + 2 * t4;
#pragma unroll
      for (int j = 0; j < kDT; ++j) {
        *reinterpret_cast<uint32_t*>(row + 8 * j) =
            PackPair<T>(o[m][j][2 * h] * inv, o[m][j][2 * h + 1] * inv);
      }
    }
  }
  __syncwarp();
#pragma unroll
  for (int idx = lane; idx < 16 * MT * kChunks; idx += 32) {
    const int rr = idx / kChunks, c = idx % kChunks;
    const int vrow = wrow0 + rr;
    if (vrow >= w.vec_count) continue;
    const int vec = w.vec_begin + vrow;
    const int rl = vec / group, gh = vec % group;
    T* dst = static_cast<T*>(a.out) + static_cast<int64_t>(w.row_begin + rl) * a.o_stride_row +
             static_cast<int64_t>(kh * group + gh) * a.o_stride_head + c * 8;
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(sO + vrow * kLd + c * 8);
  }
  if (a.lse != nullptr && t4 == 0) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int vrow = wrow0 + 16 * m + g + 8 * h;
        if (vrow >= w.vec_count) continue;
        const int vec = w.vec_begin + vrow;
        const int rl = vec / group, gh = vec % group;
        const float l = lrun[m][h];
        a.lse[static_cast<int64_t>(w.row_begin + rl) * a.num_heads + kh * group + gh] =
            l > 0.f ? (mrun[m][h] + log2f(l)) * kLn2 : -INFINITY;
      }
  }
}

// SIMT reference kernel: one warp per query vector.
constexpr int kSimtMaxDimsPerLane = 8;  // head_dim <= 256

template <typename T, bool kBottomRight>
__global__ void __launch_bounds__(kSimtThreads) AttnSimtKernel(AttnLaunch a) {
  __shared__ float sq[kSimtThreads / 32][32 * kSimtMaxDimsPerLane];
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

  for (int vrow = warp; vrow < w.vec_count; vrow += kSimtThreads / 32) {
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

// The tensor-core kernel's shapes (see TcCfg), per tile size and head_dim.
// Large tiles (128 vectors): 4 warps x 32 vectors, so each K/V tile fetched
// from L2 serves 128 vectors and each fragment read from shared memory two
// mma's. At head_dim 128 the O accumulators alone take 128 registers per
// thread, so key tiles are 32 keys and Q fragments are re-read from shared
// memory per tile; at head_dim 64, 64-key tiles and Q in registers. Small
// tiles (64 vectors, for small grids): 4 warps x 16 vectors, 64-key tiles,
// Q in registers. All fit 2 CTAs (8 warps) per SM by registers.
template <int HD>
using TcLarge = TcCfg<HD, 128, 2, HD == 64 ? 64 : 32, HD == 64>;
template <int HD>
using TcSmall = TcCfg<HD, 64, 1, 64, true>;
static_assert(TcLarge<64>::kBM == kAttnTileVectorsLarge && TcSmall<64>::kBM == kAttnTileVectorsSmall,
              "plan tile sizes");

template <typename T, typename C, bool kBottomRight>
int LaunchTc(const AttnLaunch& a, Stream stream) {
  const size_t smem = C::kTotal;
  auto kernel = AttnTcKernel<T, C, kBottomRight>;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  // Flat grid, item-major (the plan orders items heaviest first, and all kv
  // heads of an item start together); 2-D (items, kv heads) if that overflows.
  const int64_t flat = static_cast<int64_t>(a.num_items) * a.num_kv_heads;
  const dim3 grid = flat <= 0x7fffffff
                        ? dim3(static_cast<unsigned>(flat))
                        : dim3(static_cast<unsigned>(a.num_items), static_cast<unsigned>(a.num_kv_heads));
  kernel<<<grid, C::kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, typename C>
int LaunchTcMode(const AttnLaunch& a, Stream stream) {
  return a.bottom_right ? LaunchTc<T, C, true>(a, stream) : LaunchTc<T, C, false>(a, stream);
}

template <typename T, int HD>
int LaunchTcTile(const AttnLaunch& a, Stream stream) {
  switch (a.tile_vectors) {
    case kAttnTileVectorsLarge: return LaunchTcMode<T, TcLarge<HD>>(a, stream);
    case kAttnTileVectorsSmall: return LaunchTcMode<T, TcSmall<HD>>(a, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
int LaunchTcType(const AttnLaunch& a, Stream stream) {
  switch (a.head_dim) {
    case 64: return LaunchTcTile<T, 64>(a, stream);
    case 128: return LaunchTcTile<T, 128>(a, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
int LaunchSimt(const AttnLaunch& a, Stream stream) {
  const dim3 grid(static_cast<unsigned>(a.num_items), static_cast<unsigned>(a.num_kv_heads));
  if (a.bottom_right) {
    AttnSimtKernel<T, true><<<grid, kSimtThreads, 0, stream>>>(a);
  } else {
    AttnSimtKernel<T, false><<<grid, kSimtThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

size_t AttnTensorCoreSmemBytes(int head_dim, int tile_vectors) {
  const bool large = tile_vectors == kAttnTileVectorsLarge;
  if (!large && tile_vectors != kAttnTileVectorsSmall) return 0;
  switch (head_dim) {
    case 64: return large ? TcLarge<64>::kTotal : TcSmall<64>::kTotal;
    case 128: return large ? TcLarge<128>::kTotal : TcSmall<128>::kTotal;
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
