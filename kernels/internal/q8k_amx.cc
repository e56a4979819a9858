// q8k_amx.cc (internal): Q4KPanelAmx and Q6KPanelAmx of q8.h (CMakeLists.txt:
// flags; the step loop: amx_tiles.h). q4_K / q5_K: one step per sub-block
// of 32 (4- or 5-bit codes unpacked to int8 in the packed panel, scale d_x *
// d_w sc_j), the mins term once per super-block; q6_K: one step per group of 16 (q - 32 as
// int8, scale d_x * d_w sc_g; tiles begun with K = 16 bytes).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/internal/amx_tiles.h"
#include "kernels/internal/q8.h"

namespace ragkv::kernels::internal {
namespace {

// Q4K panel layout, per super-block: 8 sub-blocks of (B0, B1: the nibbles
// as int8 0..15 in VNNI order; 32 f32 d * sc_j), then 8 x 32 f32 dmin * m_j.
constexpr int64_t kQ4KSub = 2 * 512 + kAmxPanel * 4;
constexpr int64_t kQ4KSuper = 8 * kQ4KSub + 8 * kAmxPanel * 4;

// ScatterGroups: n values (a multiple of 4) into one column of a VNNI B
// tile: values 4g..4g+3 at dst + 64 g.
inline void ScatterGroups(const int8_t* vals, int n, int8_t* dst) {
  for (int g = 0; g < n / 4; ++g) std::memcpy(dst + g * 64, vals + 4 * g, 4);
}

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// FifthBit: 16 where bit `bit` of each of the 32 qh bytes is set, else 0
// (q5_K: sub-block s of a super-block takes bit s of qh[l] for element l).
inline __m256i FifthBit(__m256i qh, int bit) {
  const __m256i one = _mm256_set1_epi8(1);
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(bit)), one), 4);
}

// PackQ4K: a q4_K (q5 false) or q5_K panel: the same scales and mins; q5_K
// adds a fifth bit per value from its 32 qh bytes (values 0..31).
void PackQ4K(bool q5, const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb, uint8_t* pack) {
  if (n < kAmxPanel) std::memset(pack, 0, static_cast<size_t>(nb * kQ4KSuper));  // the tail
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const int64_t block_bytes = q5 ? 176 : 144, qs_at = q5 ? 48 : 16;
  alignas(32) int8_t vals[2][32];
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + j * w_row_bytes + b * block_bytes;
      uint8_t* sup = pack + b * kQ4KSuper;
      const float d = HalfAt(blk), dmin = HalfAt(blk + 2);
      const uint8_t* s = blk + 4;
      const __m256i qh = q5 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16))
                            : _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qs_at + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (q5) {
          lo = _mm256_or_si256(lo, FifthBit(qh, 2 * c));
          hi = _mm256_or_si256(hi, FifthBit(qh, 2 * c + 1));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(vals[0]), lo);
        _mm256_store_si256(reinterpret_cast<__m256i*>(vals[1]), hi);
        for (int half = 0; half < 2; ++half) {
          const int sub = 2 * c + half;
          const int sc = sub < 4 ? (s[sub] & 63) : ((s[sub + 4] & 0xF) | ((s[sub - 4] >> 6) << 4));
          const int mn = sub < 4 ? (s[sub + 4] & 63) : ((s[sub + 4] >> 4) | ((s[sub] >> 6) << 4));
          uint8_t* bq = sup + sub * kQ4KSub;
          reinterpret_cast<float*>(bq + 1024)[j] = d * static_cast<float>(sc);
          reinterpret_cast<float*>(sup + 8 * kQ4KSub)[sub * kAmxPanel + j] =
              dmin * static_cast<float>(mn);
          ScatterGroups(vals[half], 32, reinterpret_cast<int8_t*>(bq) + (j / 16) * 512 + (j % 16) * 4);
        }
      }
    }
  }
}

// SubtractMins: acc[r] -= sum_j dmin m_j * (d_x (bsum_2j + bsum_2j+1))[r]
// for 16 rows from i0, columns g * 16.., super-block b.
inline void SubtractMins(const Q8KActs& a, int64_t i0, int64_t b, const float* wm, int64_t g,
                         __m512 acc[16]) {
  const int64_t nb = a.blocks();
  __m512 m[8];
  for (int j = 0; j < 8; ++j) m[j] = _mm512_loadu_ps(wm + j * kAmxPanel + g * 16);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const float* dbs = a.dbsums.data() + ((i0 + r) * nb + b) * 8;
    for (int j = 0; j < 8; ++j) acc[r] = _mm512_fnmadd_ps(m[j], _mm512_set1_ps(dbs[j]), acc[r]);
  }
}

// Q6K panel layout, per super-block: 16 groups of 16 of (B0, B1: q - 32 as
// int8 in VNNI order, 4 rows of 16 x 4 each; 32 f32 d * sc_g).
constexpr int64_t kQ6KGroup = 2 * 256 + kAmxPanel * 4;
constexpr int64_t kQ6KSuper = 16 * kQ6KGroup;

// Q6KValues: the 256 values of a q6_K block minus 32, in order (ggml's bit
// layout: per half of 128, four runs of 32 from low / high nibbles of ql
// and 2-bit fields of qh).
inline void Q6KValues(const uint8_t* blk, int8_t* vals) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
  const __m256i k32 = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
        _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30))};
    for (int t = 0; t < 4; ++t) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(vals + 128 * h + 32 * t),
                          _mm256_sub_epi8(q[t], k32));
    }
  }
}

void PackQ6K(const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb, uint8_t* pack) {
  if (n < kAmxPanel) std::memset(pack, 0, static_cast<size_t>(nb * kQ6KSuper));  // the tail
  alignas(32) int8_t vals[256];
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + j * w_row_bytes + b * 210;
      const float d = HalfAt(blk + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      Q6KValues(blk, vals);
      for (int g = 0; g < 16; ++g) {
        uint8_t* bq = pack + b * kQ6KSuper + g * kQ6KGroup;
        reinterpret_cast<float*>(bq + 512)[j] = d * static_cast<float>(sc[g]);
        ScatterGroups(vals + 16 * g, 16, reinterpret_cast<int8_t*>(bq) + (j / 16) * 256 + (j % 16) * 4);
      }
    }
  }
}

}  // namespace

int64_t AmxPackBytesQ4K(int64_t k) { return (k / kQ8KBlock) * kQ4KSuper; }

void Q4KPanelAmx(const Q8KActs& a, GgmlType type, const uint8_t* w, uint64_t w_row_bytes, int64_t n,
                 float* y, int64_t ldy, float beta, uint8_t* pack) {
  const int64_t nb = a.blocks(), k = a.k;
  PackQ4K(type == GgmlType::kQ5_K, w, w_row_bytes, n, nb, pack);
  amx::Panel(a.m, n, y, ldy, beta, [&](int64_t i0, int64_t g, __m512* acc) {
    amx::Run(nb * 8, k, nb, [&](int64_t s) {  // every sub-block, one pipeline
      const int64_t b = s / 8, sub = s % 8;
      const uint8_t* bq = pack + b * kQ4KSuper + sub * kQ4KSub;
      return amx::Step{a.q.data() + i0 * k + b * kQ8KBlock + sub * 32, bq + g * 512,
                       reinterpret_cast<const float*>(bq + 1024) + g * 16, a.d.data() + i0 * nb + b};
    }, acc);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* sup = pack + b * kQ4KSuper;
      SubtractMins(a, i0, b, reinterpret_cast<const float*>(sup + 8 * kQ4KSub), g, acc);
    }
  });
}

int64_t AmxPackBytesQ6K(int64_t k) { return (k / kQ8KBlock) * kQ6KSuper; }

void Q6KPanelAmx(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta, uint8_t* pack) {
  const int64_t nb = a.blocks(), k = a.k;
  PackQ6K(w, w_row_bytes, n, nb, pack);
  amx::Panel(a.m, n, y, ldy, beta, [&](int64_t i0, int64_t g, __m512* acc) {
    amx::Run(nb * 16, k, nb, [&](int64_t s) {
      const int64_t b = s / 16, gg = s % 16;
      const uint8_t* bq = pack + b * kQ6KSuper + gg * kQ6KGroup;
      return amx::Step{a.q.data() + i0 * k + b * kQ8KBlock + gg * 16, bq + g * 256,
                       reinterpret_cast<const float*>(bq + 512) + g * 16, a.d.data() + i0 * nb + b};
    }, acc);
  });
}

}  // namespace ragkv::kernels::internal
