// panel_pack.cc (internal): the packed weight panels of panel.h, shared by
// the AMX and AVX-512 VNNI prefill kernels (CMakeLists.txt: AVX2 + F16C
// flags; no AMX or AVX-512 instruction here).
#include <immintrin.h>

#include <cstring>

#include "kernels/internal/block32.inc"
#include "kernels/internal/panel.h"

namespace ragkv::kernels::internal {
namespace {

// ScatterGroups: n values (a multiple of 4) into one column of a VNNI B
// tile: values 4g..4g+3 at dst + 64 g.
inline void ScatterGroups(const int8_t* vals, int n, int8_t* dst) {
  for (int g = 0; g < n / 4; ++g) std::memcpy(dst + g * 64, vals + 4 * g, 4);
}

// FifthBit: 16 where bit `bit` of each of the 32 qh bytes is set, else 0
// (q5_K: sub-block s of a super-block takes bit s of qh[l] for element l).
inline __m256i FifthBit(__m256i qh, int bit) {
  const __m256i one = _mm256_set1_epi8(1);
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(bit)), one), 4);
}

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

}  // namespace

void PackBlock32(GgmlType type, const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb,
                 uint8_t* pack) {
  const int64_t block_bytes = Block32Bytes(type);
  alignas(32) int8_t vals[32];
  for (int64_t b = 0; b < nb; ++b) {
    int8_t* bq = reinterpret_cast<int8_t*>(pack + b * kBlock32Stride);
    float* bd = reinterpret_cast<float*>(pack + b * kBlock32Stride + 1024);
    float* bm = bd + kPanelRows;
    for (int64_t j = 0; j < kPanelRows; ++j) {
      int8_t* dst = bq + (j / 16) * 512 + (j % 16) * 4;
      if (j >= n) {
        for (int kk = 0; kk < 8; ++kk) std::memset(dst + kk * 64, 0, 4);
        bd[j] = bm[j] = 0.0f;
        continue;
      }
      const __m256i v = Unpack32(type, w + j * w_row_bytes + b * block_bytes, &bd[j], &bm[j]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(vals), v);
      for (int kk = 0; kk < 8; ++kk) std::memcpy(dst + kk * 64, vals + kk * 4, 4);
    }
  }
}

// PackQ4K: a q4_K (q5 false) or q5_K panel: the same scales and mins; q5_K
// adds a fifth bit per value from its 32 qh bytes (values 0..31).
void PackQ4K(bool q5, const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb, uint8_t* pack) {
  if (n < kPanelRows) std::memset(pack, 0, static_cast<size_t>(nb * kQ4KSuper));  // the tail
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
          reinterpret_cast<float*>(sup + 8 * kQ4KSub)[sub * kPanelRows + j] =
              dmin * static_cast<float>(mn);
          ScatterGroups(vals[half], 32, reinterpret_cast<int8_t*>(bq) + (j / 16) * 512 + (j % 16) * 4);
        }
      }
    }
  }
}

void PackQ6K(const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb, uint8_t* pack) {
  if (n < kPanelRows) std::memset(pack, 0, static_cast<size_t>(nb * kQ6KSuper));  // the tail
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

}  // namespace ragkv::kernels::internal
