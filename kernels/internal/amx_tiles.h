// amx_tiles.h (internal; included only by translation units compiled with
// -mamx-tile -mamx-int8 -mavx512f/bw/vl): the AMX step loop shared by the
// q8_0, q4_K and q6_K panels (q8_amx.cc, q8k_amx.cc).
//
// Tiles (configured by AmxThreadBegin): tmm0 / tmm1 C (16 x 16 int32),
// tmm4 / tmm5 A (16 rows of K activation bytes), tmm6 / tmm7 B (K / 4 rows
// of 16 weight columns x 4 bytes, VNNI order). A 16 x 16 output tile keeps
// its f32 accumulator in 16 zmm registers over every step (one block of 32,
// or group of 16, of K with its own scales); two C tiles alternate so one
// product runs while the previous one is scaled.
#ifndef RAGKV_KERNELS_INTERNAL_AMX_TILES_H_
#define RAGKV_KERNELS_INTERNAL_AMX_TILES_H_

#include <immintrin.h>

#include <cstdint>

namespace ragkv::kernels::internal::amx {

// Step: one tile product: 16 activation rows at a (rows lda bytes apart),
// a B tile at b (rows 64 bytes apart), the 16 column scales at ws, the 16
// row scales at xd (xd_stride apart).
struct Step {
  const int8_t* a;
  const uint8_t* b;
  const float* ws;
  const float* xd;
};

inline void Issue0(const Step& s, int64_t lda) {
  _tile_zero(0);
  _tile_loadd(4, s.a, lda);
  _tile_loadd(6, s.b, 64);
  _tile_dpbssd(0, 4, 6);
}

inline void Issue1(const Step& s, int64_t lda) {
  _tile_zero(1);
  _tile_loadd(5, s.a, lda);
  _tile_loadd(7, s.b, 64);
  _tile_dpbssd(1, 5, 7);
}

// Scale: acc[r] += c[r] * (ws * xd[r]).
inline void Scale(const int32_t* c, const Step& s, int64_t xd_stride, __m512 acc[16]) {
  const __m512 ws = _mm512_loadu_ps(s.ws);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const __m512 p = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r));
    acc[r] = _mm512_fmadd_ps(p, _mm512_mul_ps(ws, _mm512_set1_ps(s.xd[r * xd_stride])), acc[r]);
  }
}

// Run: acc += the products of steps [0, steps), step(i) giving each.
template <typename StepAt>
inline void Run(int64_t steps, int64_t lda, int64_t xd_stride, const StepAt& step,
                __m512 acc[16]) {
  alignas(64) int32_t c[2][256];
  Step cur = step(0);
  Issue0(cur, lda);
  for (int64_t i = 0; i < steps; i += 2) {
    Step next{};
    const bool two = i + 1 < steps;
    if (two) {
      next = step(i + 1);
      Issue1(next, lda);
    }
    _tile_stored(0, c[0], 64);
    Scale(c[0], cur, xd_stride, acc);
    if (!two) break;
    if (i + 2 < steps) {
      cur = step(i + 2);
      Issue0(cur, lda);
    }
    _tile_stored(1, c[1], 64);
    Scale(c[1], next, xd_stride, acc);
  }
}

inline void Zero(__m512 acc[16]) {
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
}

// Store: rows [0, rows) and columns [0, n) (n <= 16) of acc into y (+ beta y).
inline void Store(const __m512 acc[16], int64_t rows, int64_t n, float* y, int64_t ldy,
                  float beta) {
  const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    float* out = y + r * ldy;
    __m512 v = acc[r];
    if (beta != 0.0f) {
      v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, out), _mm512_set1_ps(beta), v);
    }
    _mm512_mask_storeu_ps(out, mask, v);
  }
}

// Panel: every 16 x 16 output tile of m rows x n (<= 32) weight columns:
// body(i0, g, acc) adds rows i0.. and columns g * 16.. into the zeroed
// acc, which is then stored into y (+ beta y).
template <typename Body>
inline void Panel(int64_t m, int64_t n, float* y, int64_t ldy, float beta, const Body& body) {
  __m512 acc[16];
  for (int64_t i0 = 0; i0 < m; i0 += 16) {
    for (int64_t g = 0; g * 16 < n; ++g) {
      Zero(acc);
      body(i0, g, acc);
      Store(acc, m - i0 < 16 ? m - i0 : 16, n - g * 16 < 16 ? n - g * 16 : 16,
            y + i0 * ldy + g * 16, ldy, beta);
    }
  }
}

}  // namespace ragkv::kernels::internal::amx

#endif  // RAGKV_KERNELS_INTERNAL_AMX_TILES_H_
