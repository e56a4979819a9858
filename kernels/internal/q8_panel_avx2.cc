// q8_panel_avx2.cc (internal): the int8 panels of panel.h on AVX2 (no
// VNNI; CMakeLists.txt: AVX2 flags). The packed layouts are the AMX / VNNI
// ones; only the products differ (docs/kernels.md "AVX2 panels").
// vpmaddubsw multiplies unsigned by signed bytes and adds pairs into int16
// with saturation, so the signed codes w are made unsigned one of two ways,
// both exact:
//   - q8_0 (w in -128..127): llama.cpp's sign trick, |w| times x with w's
//     sign (|w| <= 128 and |x| <= 127, so a pair stays within int16);
//   - every other type (|w| <= 32): w + bias (0, 8, 16 or 32, so 0..63),
//     the step's int accumulator starting at -bias * sum(x) (from
//     ZeroPointSums' -128 * sum(x)); a pair is at most 2 x 63 x 127, so two
//     pairs still fit int16 and are added before widening.
// Register block: kRows activation rows x one group of 16 columns (two ymm
// of int32 a row); the two groups of a panel run one after the other.
#include <immintrin.h>

#include <cstring>

#include "kernels/internal/panel.h"

namespace ragkv::kernels::internal {
namespace {

constexpr int kRows = 4;

// Step: one span of K, as in q8_panel_vnni.cc.
struct Step {
  int64_t a;
  const uint8_t* b;
  const float* ws;
  int64_t xd, zp;
};

struct Rows {
  const int8_t* q;
  int64_t ldq;
  const float* d;
  int64_t ldd;
  const int32_t* zp;
  int64_t ldzp;
  Rows From(int64_t i) const { return {q + i * ldq, ldq, d + i * ldd, ldd, zp + i * ldzp, ldzp}; }
};

using Acc = __m256[2];  // 16 columns of f32

inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Codes: how a step's signed codes become vpmaddubsw's unsigned operand.
// kBias > 0 adds kBias; kSign (kBias < 0) keeps |w| and moves w's sign to x.
constexpr int kSign = -1;

// Pair: the int16 products of codes w (32 bytes: 8 columns x 4) with the
// broadcast activation bytes x.
template <int kBias>
inline __m256i Pair(__m256i w, __m256i x) {
  if constexpr (kBias == kSign)
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  if constexpr (kBias > 0) w = _mm256_add_epi8(w, _mm256_set1_epi8(static_cast<char>(kBias)));
  return _mm256_maddubs_epi16(w, x);
}

// Run: acc[r] += every step's product for R rows and the 16 columns of
// group g; KB bytes of K a step.
template <int R, int KB, int kBias, typename StepAt>
inline void Run(const Rows& x, int64_t steps, int64_t group_off, int g, const StepAt& at,
                Acc* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t s = 0; s < steps; ++s) {
    const Step st = at(s);
    const uint8_t* b = st.b + group_off;
    __m256i c[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int32_t init = kBias > 0 ? x.zp[r * x.ldzp + st.zp] / 128 * kBias : 0;
      c[r][0] = c[r][1] = _mm256_set1_epi32(init);
    }
    // kk in pairs (KB / 4 is 8 or 4): with a bias two int16 pairs are summed
    // before widening; the sign trick widens each.
#pragma GCC unroll 4
    for (int kk = 0; kk < KB / 4; kk += 2) {
      const __m256i* p0 = reinterpret_cast<const __m256i*>(b + 64 * kk);
      const __m256i* p1 = reinterpret_cast<const __m256i*>(b + 64 * (kk + 1));
      const __m256i w00 = _mm256_loadu_si256(p0), w01 = _mm256_loadu_si256(p0 + 1);
      const __m256i w10 = _mm256_loadu_si256(p1), w11 = _mm256_loadu_si256(p1 + 1);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i x0 = Broadcast4(x.q + r * x.ldq + st.a + 4 * kk);
        const __m256i x1 = Broadcast4(x.q + r * x.ldq + st.a + 4 * kk + 4);
        if constexpr (kBias == kSign) {
          c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(Pair<kBias>(w00, x0), ones));
          c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(Pair<kBias>(w01, x0), ones));
          c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(Pair<kBias>(w10, x1), ones));
          c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(Pair<kBias>(w11, x1), ones));
        } else {
          const __m256i s0 = _mm256_add_epi16(Pair<kBias>(w00, x0), Pair<kBias>(w10, x1));
          const __m256i s1 = _mm256_add_epi16(Pair<kBias>(w01, x0), Pair<kBias>(w11, x1));
          c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(s0, ones));
          c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(s1, ones));
        }
      }
    }
    const __m256 w0 = _mm256_loadu_ps(st.ws + 16 * g), w1 = _mm256_loadu_ps(st.ws + 16 * g + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 d = _mm256_set1_ps(x.d[r * x.ldd + st.xd]);
      acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c[r][0]), _mm256_mul_ps(w0, d), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c[r][1]), _mm256_mul_ps(w1, d), acc[r][1]);
    }
  }
}

// Mask: the lanes of the 8 columns from c0 that are below n.
inline __m256i Mask(int64_t n, int64_t c0) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - c0)), lane);
}

// Store: R rows of group g's columns below n into y (+ beta y).
template <int R>
inline void Store(const Acc* acc, int g, int64_t n, float* y, int64_t ldy, float beta) {
  for (int h = 0; h < 2; ++h) {
    const int64_t c0 = 16 * g + 8 * h;
    if (c0 >= n) return;
    const __m256i mask = Mask(n, c0);
    for (int r = 0; r < R; ++r) {
      float* out = y + r * ldy + c0;
      __m256 v = acc[r][h];
      if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_maskload_ps(out, mask), _mm256_set1_ps(beta), v);
      _mm256_maskstore_ps(out, mask, v);
    }
  }
}

// Block: rows [i, i + R) of group g: the steps, then extra(i, R, g, acc) (a
// mins term), then the store.
template <int R, int KB, int kBias, typename StepAt, typename Extra>
inline void Block(int64_t i, int g, const Rows& x, int64_t steps, int64_t group_bytes,
                  const StepAt& at, const Extra& extra, int64_t n, float* y, int64_t ldy,
                  float beta) {
  Acc acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  Run<R, KB, kBias>(x.From(i), steps, g * group_bytes, g, at, acc);
  extra(i, R, g, acc);
  Store<R>(acc, g, n, y + i * ldy, ldy, beta);
}

// Panel: the groups holding columns below n, every row of m in blocks of
// kRows (the tail by 3, 2 or 1).
template <int KB, int kBias, typename StepAt, typename Extra>
void Panel(int64_t m, const Rows& x, int64_t steps, int64_t group_bytes, const StepAt& at,
           const Extra& extra, int64_t n, float* y, int64_t ldy, float beta) {
  for (int g = 0; g < 2 && 16 * g < n; ++g) {
    int64_t i = 0;
    for (; i + kRows <= m; i += kRows) {
      Block<kRows, KB, kBias>(i, g, x, steps, group_bytes, at, extra, n, y, ldy, beta);
    }
    switch (m - i) {
      case 3:
        Block<3, KB, kBias>(i, g, x, steps, group_bytes, at, extra, n, y, ldy, beta);
        break;
      case 2:
        Block<2, KB, kBias>(i, g, x, steps, group_bytes, at, extra, n, y, ldy, beta);
        break;
      case 1:
        Block<1, KB, kBias>(i, g, x, steps, group_bytes, at, extra, n, y, ldy, beta);
        break;
      default:
        break;
    }
  }
}

// AddRows: acc[r] += sign * v (16 columns of group g, from m) * s(r).
template <typename S>
inline void AddRows(const float* m, int g, int rows, float sign, const S& s, Acc* acc) {
  const __m256 m0 = _mm256_mul_ps(_mm256_loadu_ps(m + 16 * g), _mm256_set1_ps(sign));
  const __m256 m1 = _mm256_mul_ps(_mm256_loadu_ps(m + 16 * g + 8), _mm256_set1_ps(sign));
  for (int r = 0; r < rows; ++r) {
    const __m256 v = _mm256_set1_ps(s(r));
    acc[r][0] = _mm256_fmadd_ps(m0, v, acc[r][0]);
    acc[r][1] = _mm256_fmadd_ps(m1, v, acc[r][1]);
  }
}

template <int kBias>
void Block32Panel(const Q8Acts& a, const int32_t* zp, bool mins, const uint8_t* pack, int64_t n,
                  float* y, int64_t ldy, float beta) {
  const int64_t nb = a.blocks();
  const Rows x{a.q.data(), a.k, a.d.data(), nb, zp, nb};
  const auto at = [&](int64_t b) {
    const uint8_t* bq = pack + b * kBlock32Stride;
    return Step{b * kQ8Block, bq, reinterpret_cast<const float*>(bq + 1024), b, b};
  };
  const auto add_mins = [&](int64_t i, int rows, int g, Acc* acc) {  // + m_w * d_x sum(q_x)
    if (!mins) return;
    for (int64_t b = 0; b < nb; ++b) {
      const float* m =
          reinterpret_cast<const float*>(pack + b * kBlock32Stride + 1024) + kPanelRows;
      AddRows(
          m, g, rows, 1.0f, [&](int r) { return a.s[(i + r) * nb + b]; }, acc);
    }
  };
  Panel<32, kBias>(a.m, x, nb, 512, at, add_mins, n, y, ldy, beta);
}

}  // namespace

void Q8PanelAvx2(const Q8Acts& a, const int32_t* zp, GgmlType type, const uint8_t* w,
                 uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta,
                 uint8_t* pack) {
  PackBlock32(type, w, w_row_bytes, n, a.blocks(), pack);
  const bool mins = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  switch (type) {
    case GgmlType::kQ8_0:
      return Block32Panel<kSign>(a, zp, false, pack, n, y, ldy, beta);
    case GgmlType::kQ4_0:
      return Block32Panel<8>(a, zp, false, pack, n, y, ldy, beta);
    case GgmlType::kQ5_0:
      return Block32Panel<16>(a, zp, false, pack, n, y, ldy, beta);
    default:
      return Block32Panel<0>(a, zp, mins, pack, n, y, ldy, beta);  // q4_1, q5_1: 0..31
  }
}

void Q4KPanelAvx2(const Q8KActs& a, const int32_t* zp, GgmlType type, const uint8_t* w,
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
  const auto sub_mins = [&](int64_t i, int rows, int g, Acc* acc) {  // - dmin m_j * d_x bsum_j
    for (int64_t b = 0; b < nb; ++b) {
      const float* wm = reinterpret_cast<const float*>(pack + b * kQ4KSuper + 8 * kQ4KSub);
      for (int j = 0; j < 8; ++j) {
        AddRows(
            wm + j * kPanelRows, g, rows, -1.0f,
            [&](int r) { return a.dbsums[((i + r) * nb + b) * 8 + j]; }, acc);
      }
    }
  };
  Panel<32, 0>(a.m, x, nb * 8, 512, at, sub_mins, n, y, ldy, beta);  // codes 0..31
}

void Q6KPanelAvx2(const Q8KActs& a, const int32_t* zp, const uint8_t* w, uint64_t w_row_bytes,
                  int64_t n, float* y, int64_t ldy, float beta, uint8_t* pack) {
  const int64_t nb = a.blocks();
  PackQ6K(w, w_row_bytes, n, nb, pack);
  const Rows x{a.q.data(), a.k, a.d.data(), nb, zp, nb * 16};
  const auto at = [&](int64_t s) {  // every group of 16
    const int64_t b = s / 16, g = s % 16;
    const uint8_t* bq = pack + b * kQ6KSuper + g * kQ6KGroup;
    return Step{b * kQ8KBlock + g * 16, bq, reinterpret_cast<const float*>(bq + 512), b, s};
  };
  const auto none = [](int64_t, int, int, Acc*) {};
  Panel<16, 32>(a.m, x, nb * 16, 256, at, none, n, y, ldy, beta);  // codes -32..31
}

}  // namespace ragkv::kernels::internal
