// q8.h (internal): products of Q8_0 weights with activations quantized to
// q8_0 blocks, the int8 path llama.cpp's CPU backend takes for Q8_0 files
// (docs/kernels.md, "Q8_0 weights: int8 products"), and of q4_K / q6_K
// weights with q8_K activations (decode). The activation rule is
// llama.cpp's x86 quantize_row_q8_0: per block of 32, amax = max |x|,
// d = f16(amax / 127), q = round_half_even(x * (127 / amax)) (0 when amax is
// 0); a block's product is d_x * d_w * (q_x . q_w), the int dot exact. A
// block holding NaN or inf (either rule) gets q = 0 and d = NaN, so its
// products are NaN on every kernel, as the f32 product would be.
// Kernels: scalar, AVX2 (maddubs), AVX-512 VNNI dots, and for many rows the
// packed panels of panel.h (AMX-INT8 tiles, or AVX-512 VNNI). Every kernel computes the same int dots and differs only in the f32
// summation order of the scaled block sums. Thread-safe (pure).
#ifndef RAGKV_KERNELS_INTERNAL_Q8_H_
#define RAGKV_KERNELS_INTERNAL_Q8_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ggml_quant.h"
#include "kernels/internal/isa.h"

namespace ragkv::kernels::internal {

inline constexpr int kQ8Block = 32;
inline constexpr int kQ8BlockBytes = 34;  // f16 d, then 32 int8

// Q8HalfAt: the f16 at p (unaligned) as f32. Static: each ISA's translation
// unit keeps its own copy (no COMDAT compiled for another ISA is shared).
static inline float Q8HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfBitsToFloat(h);
}

// Q8Acts: m rows of k activations as q8_0 blocks: q [m_pad][k] int8 and d
// [m_pad][k / 32] f32 (each the f16-rounded scale). Rows m..m_pad are zero.
struct Q8Acts {
  int64_t m = 0, m_pad = 0, k = 0;
  std::vector<int8_t> q;
  std::vector<float> d;
  // s: d * (sum of the block's q), [m_pad][k / 32]; filled by SumActsQ8
  // (the mins term of q4_1 / q5_1 weights), empty otherwise.
  std::vector<float> s;
  int64_t blocks() const { return k / kQ8Block; }
  const int8_t* qrow(int64_t i) const { return q.data() + i * k; }
  const float* drow(int64_t i) const { return d.data() + i * blocks(); }
};

// QuantizeActsQ8: x [m][k] (row stride ldx floats, k a multiple of 32) into
// a, rows padded with zeros to a multiple of `pad`. Rows in parallel.
void QuantizeActsQ8(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t pad, Q8Acts* a);
// SumActsQ8: a->s from a->q and a->d (padding rows: 0).
void SumActsQ8(Q8Acts* a);

// Block32: the weight encodings with blocks of 32 elements that multiply
// q8_0 activations: q8_0, q4_0, q5_0 (d * q, q signed), q4_1, q5_1 (d * q +
// m: the mins term m * a.s, so SumActsQ8 must have run).
inline bool Block32(GgmlType t) {
  return t == GgmlType::kQ8_0 || t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 ||
         t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1;
}

// Q8TileFn: y[(i - i0) * ldy + j] = sum over blocks of x row i (i0 <= i <
// i0 + m) times weight row j (j < n; rows of `type`, a Block32 type,
// w_row_bytes apart at w), plus beta * y. For q4_1 / q5_1 SumActsQ8 must
// have run (the mins term).
using Q8TileFn = void (*)(const Q8Acts& a, GgmlType type, int64_t i0, int64_t m, const uint8_t* w,
                          uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta);
void Q8TileScalar(const Q8Acts& a, GgmlType type, int64_t i0, int64_t m, const uint8_t* w,
                  uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta);
void Q8TileAvx2(const Q8Acts& a, GgmlType type, int64_t i0, int64_t m, const uint8_t* w,
                uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta);
void Q8TileVnni(const Q8Acts& a, GgmlType type, int64_t i0, int64_t m, const uint8_t* w,
                uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta);
// ActiveQ8Tile: the tile kernel for ActiveIsa() (VNNI when the CPU has it).
Q8TileFn ActiveQ8Tile();

// q8_K activations, the partner of q4_K and q6_K weights (llama.cpp's
// quantize_row_q8_K): per block of 256, max = the value of largest |x|
// (signed), iscale = -127 / max, q = min(127, round_half_even(iscale * x)),
// d = 1 / iscale in f32 (q and d all 0 when max is 0), bsums = sums of each
// 16 consecutive q. A weight block's product is then llama.cpp's: d_x *
// d_w * sum_j sc_j (q_w . q_x)_j - d_x * dmin_w * sum_j m_j bsum_j (q4_K,
// and q5_K with 5-bit q_w), d_x * d_w * sum_j sc_j ((q_w . q_x)_j - 32 bsum_j) (q6_K), ints exact.
inline constexpr int kQ8KBlock = 256;
struct Q8KActs {
  int64_t m = 0, m_pad = 0, k = 0;  // rows m..m_pad: zero
  std::vector<int8_t> q;       // [m_pad][k]
  std::vector<float> d;        // [m_pad][k / 256]
  std::vector<int16_t> bsums;  // [m_pad][k / 16]
  // dbsums: d * (bsum_2j + bsum_2j+1), [m_pad][k / 256][8] (the q4_K mins
  // term's activation side, for the AMX panels).
  std::vector<float> dbsums;
  int64_t blocks() const { return k / kQ8KBlock; }
};
void QuantizeActsQ8K(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t pad, Q8KActs* a);
// QKTileFn: y[i * ldy + j] (+ beta y) for every row i < a.m and weight row
// j < n of a q4_K, q5_K or q6_K matrix (rows w_row_bytes apart at w).
using QKTileFn = void (*)(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n,
                          float* y, int64_t ldy, float beta);
void Q4KTileScalar(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                   int64_t ldy, float beta);
void Q5KTileScalar(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                   int64_t ldy, float beta);
void Q6KTileScalar(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                   int64_t ldy, float beta);
void Q4KTileAvx2(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta);
void Q5KTileAvx2(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta);
void Q6KTileAvx2(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta);
// QuantizeBlock*: one block by the rules above (scalar in q8.cc / q8k.cc,
// AVX2 in q8k_avx2.cc: bit-identical); QuantizeActs* pick by ActiveIsa().
void QuantizeBlockQ8Avx2(const float* x, int8_t* q, float* d);
void QuantizeBlockQ8KAvx2(const float* x, int8_t* q, float* d, int16_t* bsums);
// ActiveQKTile: the q4_K, q5_K or q6_K (`type`) tile for ActiveIsa().
QKTileFn ActiveQKTile(GgmlType type);

// AMX-INT8 (Sapphire Rapids and later). kAmxPanel weight rows per panel.
inline constexpr int kAmxPanel = 32;
// AmxPackBytes: bytes of one packed panel for k columns (per block of 32:
// two B tiles, 32 f32 scales, 32 f32 mins).
inline int64_t AmxPackBytes(int64_t k) { return (k / kQ8Block) * (2 * 512 + 2 * kAmxPanel * 4); }
// Q8PanelAmx: y[i * ldy + j] for every row i < a.m and weight row j < n
// (n <= kAmxPanel) of `w`, of encoding `type` (Block32); a.m_pad a
// multiple of 32; `pack` AmxPackBytes(k) bytes of scratch. The calling
// thread must have run AmxThreadBegin.
void Q8PanelAmx(const Q8Acts& a, GgmlType type, const uint8_t* w, uint64_t w_row_bytes, int64_t n,
                float* y, int64_t ldy, float beta, uint8_t* pack);
// Q4KPanelAmx: the same for a q4_K or q5_K panel (`type`) and q8_K
// activations (a.m_pad a multiple of 32); `pack` AmxPackBytesQ4K(k) bytes.
int64_t AmxPackBytesQ4K(int64_t k);
void Q4KPanelAmx(const Q8KActs& a, GgmlType type, const uint8_t* w, uint64_t w_row_bytes, int64_t n,
                 float* y, int64_t ldy, float beta, uint8_t* pack);
// Q6KPanelAmx: the same for q6_K; the thread's tiles begun with k_bytes 16.
int64_t AmxPackBytesQ6K(int64_t k);
void Q6KPanelAmx(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta, uint8_t* pack);
// AmxThreadBegin / AmxThreadEnd: load (the products spanning k_bytes of K:
// 32 for q8_0 / q4_K, 16 for q6_K) / restore this thread's tile config.
void AmxThreadBegin(int k_bytes = 32);
void AmxThreadEnd();

}  // namespace ragkv::kernels::internal

#endif  // RAGKV_KERNELS_INTERNAL_Q8_H_
