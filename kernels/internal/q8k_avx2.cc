// q8k_avx2.cc (internal): the AVX2 q4_K / q6_K tiles of q8.h (CMakeLists.txt:
// flags). Unsigned weight quants times signed q8_K values by maddubs (no
// int16 saturation: 63 * 127 * 2 < 32767), then scaled per 16 or 32 by madd
// with the block's int scales; the same ints as q8k.cc's scalar tiles.
#include <immintrin.h>

#include <cstring>

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

// Q4KRows: R rows of q8_K activations (from i) times one q4_K weight row.
template <int R>
void Q4KRows(const Q8KActs& a, int64_t i, const uint8_t* wr, float* y, int64_t ldy, float beta) {
  const int64_t nb = a.blocks();
  const __m256i m4 = _mm256_set1_epi8(0xF);
  float sum[R] = {};
  for (int64_t b = 0; b < nb; ++b, wr += 144) {
    const uint8_t* s = wr + 4;
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = j < 4 ? (s[j] & 63) : ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
      mn[j] = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
    __m256i q[8], s16[8];
    for (int c = 0; c < 4; ++c) {
      const __m256i v = Load(wr + 16 + 32 * c);
      q[2 * c] = _mm256_and_si256(v, m4);
      q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
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
  Tile<Q4KRows<4>, Q4KRows<1>>(a, w, w_row_bytes, n, y, ldy, beta);
}

void Q6KTileAvx2(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta) {
  Tile<Q6KRows<4>, Q6KRows<1>>(a, w, w_row_bytes, n, y, ldy, beta);
}

}  // namespace ragkv::kernels::internal
