// q8_panel_vnni.cc (internal): the VNNI panels of panel.h (CMakeLists.txt:
// AVX-512 VNNI flags). vpdpbusd multiplies unsigned by signed bytes, so the
// packed codes w (signed int8) are read as w + 128 (xor 0x80) and each
// step's int accumulator starts at -128 * sum(x) (ZeroPointSums): the int
// dot is exactly the signed w . x the AMX tiles compute. Register block:
// kRows activation rows x the panel's 32 columns; int accumulators per step
// (scaled by d_w * d_x as the AMX tiles scale them), f32 ones over the steps.
#include <immintrin.h>

#include <cstring>

#include "kernels/internal/panel.h"

namespace ragkv::kernels::internal {
namespace {

constexpr int kRows = 4;

// Step: one span of K: its first activation column a, the B0 tile at b (B1
// at b + group bytes), the 32 column scales at ws, and its column in the
// row scales (xd) and in the zero-point sums (zp).
struct Step {
  int64_t a;
  const uint8_t* b;
  const float* ws;
  int64_t xd, zp;
};

// Rows: activation codes, row scales and zero-point sums, from some row.
struct Rows {
  const int8_t* q;
  int64_t ldq;
  const float* d;
  int64_t ldd;
  const int32_t* zp;
  int64_t ldzp;
  Rows From(int64_t i) const { return {q + i * ldq, ldq, d + i * ldd, ldd, zp + i * ldzp, ldzp}; }
};

using Acc = __m512[2];

// Run: acc[r] += every step's product for R rows; KB bytes of K a step.
template <int R, int KB, typename StepAt>
inline void Run(const Rows& x, int64_t steps, int64_t group_bytes, const StepAt& at, Acc* acc) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t s = 0; s < steps; ++s) {
    const Step st = at(s);
    __m512i c[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) c[r][0] = c[r][1] = _mm512_set1_epi32(x.zp[r * x.ldzp + st.zp]);
#pragma GCC unroll 8
    for (int kk = 0; kk < KB / 4; ++kk) {
      const __m512i b0 = _mm512_xor_si512(_mm512_loadu_si512(st.b + 64 * kk), flip);
      const __m512i b1 = _mm512_xor_si512(_mm512_loadu_si512(st.b + group_bytes + 64 * kk), flip);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        int32_t v;
        std::memcpy(&v, x.q + r * x.ldq + st.a + 4 * kk, 4);
        const __m512i xb = _mm512_set1_epi32(v);
        c[r][0] = _mm512_dpbusd_epi32(c[r][0], b0, xb);
        c[r][1] = _mm512_dpbusd_epi32(c[r][1], b1, xb);
      }
    }
    const __m512 w0 = _mm512_loadu_ps(st.ws), w1 = _mm512_loadu_ps(st.ws + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 d = _mm512_set1_ps(x.d[r * x.ldd + st.xd]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[r][0]), _mm512_mul_ps(w0, d), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[r][1]), _mm512_mul_ps(w1, d), acc[r][1]);
    }
  }
}

// Store: R rows, columns [0, n) (n <= 32) of acc into y (+ beta y).
template <int R>
inline void Store(const Acc* acc, int64_t n, float* y, int64_t ldy, float beta) {
  const __mmask16 mask[2] = {
      static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1),
      static_cast<__mmask16>(n <= 16 ? 0 : n >= 32 ? 0xFFFF : (1u << (n - 16)) - 1)};
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < 2; ++g) {
      float* out = y + r * ldy + g * 16;
      __m512 v = acc[r][g];
      if (beta != 0.0f) {
        v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask[g], out), _mm512_set1_ps(beta), v);
      }
      _mm512_mask_storeu_ps(out, mask[g], v);
    }
  }
}

// Block: rows [i, i + R): the steps, then extra(i, R, acc) (a mins term),
// then the store.
template <int R, int KB, typename StepAt, typename Extra>
inline void Block(int64_t i, const Rows& x, int64_t steps, int64_t group_bytes, const StepAt& at,
                  const Extra& extra, int64_t n, float* y, int64_t ldy, float beta) {
  Acc acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  Run<R, KB>(x.From(i), steps, group_bytes, at, acc);
  extra(i, R, acc);
  Store<R>(acc, n, y + i * ldy, ldy, beta);
}

// Panel: every row of m in blocks of kRows (the tail by 3, 2 or 1).
template <int KB, typename StepAt, typename Extra>
void Panel(int64_t m, const Rows& x, int64_t steps, int64_t group_bytes, const StepAt& at,
           const Extra& extra, int64_t n, float* y, int64_t ldy, float beta) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) {
    Block<kRows, KB>(i, x, steps, group_bytes, at, extra, n, y, ldy, beta);
  }
  switch (m - i) {
    case 3: return Block<3, KB>(i, x, steps, group_bytes, at, extra, n, y, ldy, beta);
    case 2: return Block<2, KB>(i, x, steps, group_bytes, at, extra, n, y, ldy, beta);
    case 1: return Block<1, KB>(i, x, steps, group_bytes, at, extra, n, y, ldy, beta);
    default: return;
  }
}

void Q8PanelVnni(const Q8Acts& a, const int32_t* zp, GgmlType type, const uint8_t* w,
                 uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta, uint8_t* pack) {
  const int64_t nb = a.blocks();
  const bool mins = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  PackBlock32(type, w, w_row_bytes, n, nb, pack);
  const Rows x{a.q.data(), a.k, a.d.data(), nb, zp, nb};
  const auto at = [&](int64_t b) {
    const uint8_t* bq = pack + b * kBlock32Stride;
    return Step{b * kQ8Block, bq, reinterpret_cast<const float*>(bq + 1024), b, b};
  };
  const auto add_mins = [&](int64_t i, int rows, Acc* acc) {  // + m_w * d_x sum(q_x)
    if (!mins) return;
    for (int64_t b = 0; b < nb; ++b) {
      const float* m = reinterpret_cast<const float*>(pack + b * kBlock32Stride + 1024) + kPanelRows;
      const __m512 m0 = _mm512_loadu_ps(m), m1 = _mm512_loadu_ps(m + 16);
      for (int r = 0; r < rows; ++r) {
        const __m512 s = _mm512_set1_ps(a.s[(i + r) * nb + b]);
        acc[r][0] = _mm512_fmadd_ps(m0, s, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(m1, s, acc[r][1]);
      }
    }
  };
  Panel<32>(a.m, x, nb, 512, at, add_mins, n, y, ldy, beta);
}

void Q4KPanelVnni(const Q8KActs& a, const int32_t* zp, GgmlType type, const uint8_t* w,
                  uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta,
                  uint8_t* pack) {
  const int64_t nb = a.blocks();
  PackQ4K(type == GgmlType::kQ5_K, w, w_row_bytes, n, nb, pack);
  const Rows x{a.q.data(), a.k, a.d.data(), nb, zp, nb * 8};
  const auto at = [&](int64_t s) {  // every sub-block of 32
    const int64_t b = s / 8, sub = s % 8;
    const uint8_t* bq = pack + b * kQ4KSuper + sub * kQ4KSub;
    return Step{b * kQ8KBlock + sub * 32, bq, reinterpret_cast<const float*>(bq + 1024), b, s};
  };
  const auto sub_mins = [&](int64_t i, int rows, Acc* acc) {  // - dmin m_j * d_x bsum_j
    for (int64_t b = 0; b < nb; ++b) {
      const float* wm = reinterpret_cast<const float*>(pack + b * kQ4KSuper + 8 * kQ4KSub);
      for (int j = 0; j < 8; ++j) {
        const __m512 m0 = _mm512_loadu_ps(wm + j * kPanelRows);
        const __m512 m1 = _mm512_loadu_ps(wm + j * kPanelRows + 16);
        for (int r = 0; r < rows; ++r) {
          const __m512 s = _mm512_set1_ps(a.dbsums[((i + r) * nb + b) * 8 + j]);
          acc[r][0] = _mm512_fnmadd_ps(m0, s, acc[r][0]);
          acc[r][1] = _mm512_fnmadd_ps(m1, s, acc[r][1]);
        }
      }
    }
  };
  Panel<32>(a.m, x, nb * 8, 512, at, sub_mins, n, y, ldy, beta);
}

void Q6KPanelVnni(const Q8KActs& a, const int32_t* zp, const uint8_t* w, uint64_t w_row_bytes,
                  int64_t n, float* y, int64_t ldy, float beta, uint8_t* pack) {
  const int64_t nb = a.blocks();
  PackQ6K(w, w_row_bytes, n, nb, pack);
  const Rows x{a.q.data(), a.k, a.d.data(), nb, zp, nb * 16};
  const auto at = [&](int64_t s) {  // every group of 16
    const int64_t b = s / 16, g = s % 16;
    const uint8_t* bq = pack + b * kQ6KSuper + g * kQ6KGroup;
    return Step{b * kQ8KBlock + g * 16, bq, reinterpret_cast<const float*>(bq + 512), b, s};
  };
  const auto none = [](int64_t, int, Acc*) {};
  Panel<16>(a.m, x, nb * 16, 256, at, none, n, y, ldy, beta);
}

}  // namespace

const PanelKernels kVnniPanels{Q8PanelVnni, Q4KPanelVnni, Q6KPanelVnni};

}  // namespace ragkv::kernels::internal
