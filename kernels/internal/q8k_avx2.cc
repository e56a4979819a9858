// q8k_avx2.cc (internal): the AVX2 q4_K / q5_K / q6_K tiles of q8.h (CMakeLists.txt:
// flags). Unsigned weight quants times signed q8_K values by maddubs (no
// int16 saturation: 63 * 127 * 2 < 32767), then scaled per 16 or 32 by madd
// with the block's int scales; the same ints as q8k.cc's scalar tiles.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/internal/q8.h"

namespace ragkv::kernels::internal {
namespace {

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline int32_t HSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline __m256i Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// ScaledDot: sum of (q . x) per 16 scaled by s16's int16 scales.
inline __m256i ScaledDot(__m256i q, const int8_t* x, __m256i s16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, Load(x)), s16);
}

inline __m256i Scales(int lo, int hi) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)),
                          _mm_set1_epi16(static_cast<int16_t>(lo)));
}

// FifthBit: byte l = 16 where bit `bit` of byte l of hb is set (the 16-bit
// shifts carry bits across bytes only into bits the mask drops).
inline __m256i FifthBit(__m256i hb, int bit) {
  const __m256i v = bit <= 4 ? _mm256_slli_epi16(hb, 4 - bit) : _mm256_srli_epi16(hb, bit - 4);
  return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

// Q45KRows: R rows of q8_K activations (from i) times one q4_K weight row
// (q5 false: 144-byte blocks) or q5_K row (176 bytes: fifth bits at +16,
// nibbles at +48; values 0..31, and 31 * 127 * 2 < 32767 for maddubs).
template <int R, bool q5>
void Q45KRows(const Q8KActs& a, int64_t i, const uint8_t* wr, float* y, int64_t ldy, float beta) {
  const int64_t nb = a.blocks();
  const __m256i m4 = _mm256_set1_epi8(0xF);
  float sum[R] = {};
  for (int64_t b = 0; b < nb; ++b, wr += q5 ? 176 : 144) {
    const uint8_t* s = wr + 4;
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = j < 4 ? (s[j] & 63) : ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
      mn[j] = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
    __m256i q[8], s16[8];
    const __m256i hb = q5 ? Load(wr + 16) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i v = Load(wr + (q5 ? 48 : 16) + 32 * c);
      q[2 * c] = _mm256_and_si256(v, m4);
      q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if (q5) {
        q[2 * c] = _mm256_or_si256(q[2 * c], FifthBit(hb, 2 * c));
        q[2 * c + 1] = _mm256_or_si256(q[2 * c + 1], FifthBit(hb, 2 * c + 1));
      }
      s16[2 * c] = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * c]));
      s16[2 * c + 1] = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * c + 1]));
    }
    const float dw = HalfAt(wr), dmin = HalfAt(wr + 2);
    for (int r = 0; r < R; ++r) {
      const int8_t* x = a.q.data() + (i + r) * a.k + b * kQ8KBlock;
      __m256i acc = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) acc = _mm256_add_epi32(acc, ScaledDot(q[j], x + 32 * j, s16[j]));
      const int16_t* bs = a.bsums.data() + ((i + r) * nb + b) * 16;
      int32_t summs = 0;
      for (int j = 0; j < 8; ++j) summs += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
      const float dx = a.d[(i + r) * nb + b];
      sum[r] += dx * dw * static_cast<float>(HSum(acc)) - dx * dmin * static_cast<float>(summs);
    }
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = beta == 0.0f ? sum[r] : sum[r] + beta * y[r * ldy];
}

// Q6KRows: R rows of q8_K activations (from i) times one q6_K weight row.
template <int R>
void Q6KRows(const Q8KActs& a, int64_t i, const uint8_t* wr, float* y, int64_t ldy, float beta) {
  const int64_t nb = a.blocks();
  const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
  float sum[R] = {};
  for (int64_t b = 0; b < nb; ++b, wr += 210) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(wr + 192);
    __m256i q[8], s16[8];
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = Load(wr + 64 * h), l1 = Load(wr + 64 * h + 32);
      const __m256i hb = Load(wr + 128 + 32 * h);
      q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                     _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
      q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                     _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
      q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                     _mm256_and_si256(hb, m30));
      q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                     _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
      for (int t = 0; t < 4; ++t) s16[4 * h + t] = Scales(sc[8 * h + 2 * t], sc[8 * h + 2 * t + 1]);
    }
    const float dw = HalfAt(wr + 208);
    for (int r = 0; r < R; ++r) {
      const int8_t* x = a.q.data() + (i + r) * a.k + b * kQ8KBlock;
      __m256i acc = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t) acc = _mm256_add_epi32(acc, ScaledDot(q[t], x + 32 * t, s16[t]));
      const int16_t* bs = a.bsums.data() + ((i + r) * nb + b) * 16;
      int32_t offset = 0;
      for (int g = 0; g < 16; ++g) offset += sc[g] * bs[g];
      const float dx = a.d[(i + r) * nb + b];
      sum[r] += dx * dw * static_cast<float>(HSum(acc) - 32 * offset);
    }
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = beta == 0.0f ? sum[r] : sum[r] + beta * y[r * ldy];
}

template <void (*Rows4)(const Q8KActs&, int64_t, const uint8_t*, float*, int64_t, float),
          void (*Rows1)(const Q8KActs&, int64_t, const uint8_t*, float*, int64_t, float)>
void Tile(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
          int64_t ldy, float beta) {
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* wr = w + j * w_row_bytes;
    int64_t i = 0;
    for (; i + 4 <= a.m; i += 4) Rows4(a, i, wr, y + i * ldy + j, ldy, beta);
    for (; i < a.m; ++i) Rows1(a, i, wr, y + i * ldy + j, ldy, beta);
  }
}

}  // namespace

void Q4KTileAvx2(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta) {
  Tile<Q45KRows<4, false>, Q45KRows<1, false>>(a, w, w_row_bytes, n, y, ldy, beta);
}

void Q5KTileAvx2(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta) {
  Tile<Q45KRows<4, true>, Q45KRows<1, true>>(a, w, w_row_bytes, n, y, ldy, beta);
}

void Q6KTileAvx2(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta) {
  Tile<Q6KRows<4>, Q6KRows<1>>(a, w, w_row_bytes, n, y, ldy, beta);
}

}  // namespace ragkv::kernels::internal

// ------------------------------------------------------------ quantization
// The q8.h rules with AVX2: the same float products, the same round-half-
// even (_mm256_round_ps), the same f16 rounding (F16C), so bit-identical to
// q8.cc / q8k.cc's scalar code (tests/kernels/q8_gemm_test.cc checks both).

namespace ragkv::kernels::internal {
namespace {

inline __m256 Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline __m256i RoundToInt(__m256 v) {
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Pack32: four vectors of 8 int32 (each in [-127, 127]) to 32 int8 in order.
inline void Pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3, int8_t* q) {
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(b, order));
}

inline int32_t HSum(__m256i a, __m256i b) { return HSum(_mm256_add_epi32(a, b)); }

// AllFinite: every lane of v is finite (NaN and inf compare false).
inline bool AllFinite(__m256 v) {
  return _mm256_movemask_ps(_mm256_cmp_ps(Abs(v), _mm256_set1_ps(INFINITY), _CMP_LT_OQ)) == 0xFF;
}

// NonFinite: the q8.h result for a block holding NaN or inf.
inline void NonFinite(int8_t* q, int n, float* d) {
  std::memset(q, 0, static_cast<size_t>(n));
  *d = std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

void QuantizeBlockQ8Avx2(const float* x, int8_t* q, float* d) {
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  if (!AllFinite(v[0]) || !AllFinite(v[1]) || !AllFinite(v[2]) || !AllFinite(v[3])) {
    return NonFinite(q, kQ8Block, d);
  }
  const float amax =
      HMax(_mm256_max_ps(_mm256_max_ps(Abs(v[0]), Abs(v[1])), _mm256_max_ps(Abs(v[2]), Abs(v[3]))));
  *d = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  Pack32(RoundToInt(_mm256_mul_ps(v[0], id)), RoundToInt(_mm256_mul_ps(v[1], id)),
         RoundToInt(_mm256_mul_ps(v[2], id)), RoundToInt(_mm256_mul_ps(v[3], id)), q);
}

void QuantizeBlockQ8KAvx2(const float* x, int8_t* q, float* d, int16_t* bsums) {
  __m256 mv = _mm256_setzero_ps();
  bool finite = true;
  for (int i = 0; i < 32; ++i) {
    const __m256 v = _mm256_loadu_ps(x + 8 * i);
    finite = finite && AllFinite(v);
    mv = _mm256_max_ps(mv, Abs(v));
  }
  if (!finite) {
    std::memset(bsums, 0, 16 * sizeof(int16_t));
    return NonFinite(q, kQ8KBlock, d);
  }
  const float amax = HMax(mv);
  if (amax == 0.0f) {
    std::memset(q, 0, kQ8KBlock);
    std::memset(bsums, 0, 16 * sizeof(int16_t));
    *d = 0.0f;
    return;
  }
  float max = 0.0f;  // the first value of largest magnitude, as the scalar loop keeps
  for (int i = 0; i < 32; ++i) {
    const int hit = _mm256_movemask_ps(
        _mm256_cmp_ps(Abs(_mm256_loadu_ps(x + 8 * i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
    if (hit != 0) {
      max = x[8 * i + __builtin_ctz(static_cast<unsigned>(hit))];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m256 s = _mm256_set1_ps(iscale), top = _mm256_set1_ps(127.0f);
  for (int g = 0; g < 8; ++g) {  // 32 values: two bsums of 16
    __m256i iv[4];
    for (int i = 0; i < 4; ++i) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(s, _mm256_loadu_ps(x + 32 * g + 8 * i)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      iv[i] = _mm256_cvtps_epi32(_mm256_min_ps(r, top));
    }
    Pack32(iv[0], iv[1], iv[2], iv[3], q + 32 * g);
    bsums[2 * g] = static_cast<int16_t>(HSum(iv[0], iv[1]));
    bsums[2 * g + 1] = static_cast<int16_t>(HSum(iv[2], iv[3]));
  }
  *d = 1.0f / iscale;
}

}  // namespace ragkv::kernels::internal
