// q8_amx.cc (internal): Q8PanelAmx of q8.h on AMX-INT8 tiles (CMakeLists.txt:
// flags). Tiles: C0..C3 (tmm0-3) 16 x 16 int32, a 2 x 2 grid over 32
// activation rows x 32 weight rows; A0, A1 (tmm4-5) 16 rows x 32 int8 of
// activations; B0, B1 (tmm6-7) one q8_0 block of 16 weight rows in VNNI
// order (8 rows of 16 x 4 int8). Every block of 32 gets its own tile product
// (its scales differ), which is then scaled into an f32 accumulator. q4_K
// weights: the same per sub-block of 32 (nibbles unpacked to int8 in the
// packed panel, scale d * sc_j), minus the mins term once per super-block;
// q6_K: per group of 16 (q - 32 as int8, scale d * sc_g; tiles configured
// for K = 16 bytes).
#include <immintrin.h>

#include <cstring>

#include "kernels/internal/q8.h"

namespace ragkv::kernels::internal {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Pack: one panel of n <= 32 weight rows: per block, B0 and B1 (512 bytes
// each, zero rows past n), then the 32 f32 weight scales.
void Pack(const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb, uint8_t* pack) {
  const int64_t stride = 2 * 512 + kAmxPanel * 4;
  for (int64_t b = 0; b < nb; ++b) {
    int8_t* bq = reinterpret_cast<int8_t*>(pack + b * stride);
    float* bd = reinterpret_cast<float*>(pack + b * stride + 1024);
    for (int64_t j = 0; j < kAmxPanel; ++j) {
      int8_t* dst = bq + (j / 16) * 512 + (j % 16) * 4;
      if (j >= n) {
        for (int kk = 0; kk < 8; ++kk) std::memset(dst + kk * 64, 0, 4);
        bd[j] = 0.0f;
        continue;
      }
      const uint8_t* blk = w + j * w_row_bytes + b * kQ8BlockBytes;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      bd[j] = _cvtsh_ss(h);
      for (int kk = 0; kk < 8; ++kk) std::memcpy(dst + kk * 64, blk + 2 + kk * 4, 4);
    }
  }
}

// Accumulate: acc[32][32] += C (the four 16 x 16 int32 tiles in c) scaled
// by the activation scales xd (row i at xd[i * nb]) and the panel's bd.
void Accumulate(const int32_t* c, const float* xd, int64_t nb, const float* bd, float* acc) {
  for (int t = 0; t < 4; ++t) {
    const int h = t / 2, g = t % 2;
    const __m512 dw = _mm512_loadu_ps(bd + g * 16);
    for (int r = 0; r < 16; ++r) {
      const int row = h * 16 + r;
      float* out = acc + row * 32 + g * 16;
      const __m512 p = _mm512_cvtepi32_ps(_mm512_loadu_si512(c + t * 256 + r * 16));
      const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(xd[row * nb]));
      _mm512_storeu_ps(out, _mm512_fmadd_ps(p, s, _mm512_loadu_ps(out)));
    }
  }
}

// TileProduct: c = the four int32 tiles of 32 activation rows (x0, rows k
// bytes apart) times one packed block of 32 weight rows (b0: B0, B1).
// (B1 at b0 + b1_offset; the tile config sets the K bytes a product spans.)
inline void TileProduct(const int8_t* x0, int64_t k, const uint8_t* b0, int32_t* c,
                        int64_t b1_offset = 512) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, x0, k);
  _tile_loadd(5, x0 + 16 * k, k);
  _tile_loadd(6, b0, 64);
  _tile_loadd(7, b0 + b1_offset, 64);
  _tile_dpbssd(0, 4, 6);
  _tile_dpbssd(1, 4, 7);
  _tile_dpbssd(2, 5, 6);
  _tile_dpbssd(3, 5, 7);
  _tile_stored(0, c, 64);
  _tile_stored(1, c + 256, 64);
  _tile_stored(2, c + 512, 64);
  _tile_stored(3, c + 768, 64);
}

// Group: 32 activation rows from i0 times the packed panel into acc.
void Group(const Q8Acts& a, int64_t i0, const uint8_t* pack, float* acc) {
  const int64_t nb = a.blocks(), k = a.k, stride = 2 * 512 + kAmxPanel * 4;
  alignas(64) int32_t c[4 * 256];
  std::memset(acc, 0, 32 * 32 * sizeof(float));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bq = pack + b * stride;
    TileProduct(a.qrow(i0) + b * kQ8Block, k, bq, c);
    Accumulate(c, a.drow(i0) + b, nb, reinterpret_cast<const float*>(bq + 1024), acc);
  }
}

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

void PackQ4K(const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb, uint8_t* pack) {
  if (n < kAmxPanel) std::memset(pack, 0, static_cast<size_t>(nb * kQ4KSuper));  // the tail
  const __m256i m4 = _mm256_set1_epi8(0xF);
  alignas(32) int8_t vals[2][32];
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + j * w_row_bytes + b * 144;
      uint8_t* sup = pack + b * kQ4KSuper;
      const float d = HalfAt(blk), dmin = HalfAt(blk + 2);
      const uint8_t* s = blk + 4;
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * c));
        _mm256_store_si256(reinterpret_cast<__m256i*>(vals[0]), _mm256_and_si256(v, m4));
        _mm256_store_si256(reinterpret_cast<__m256i*>(vals[1]),
                           _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
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

// SubtractMins: acc[r][c] -= d_x[r] * sum_j dmin m_j[c] (bsum_2j + bsum_2j+1)[r].
void SubtractMins(const Q8KActs& a, int64_t i0, int64_t b, const float* wm, float* acc) {
  const int64_t nb = a.blocks();
  for (int r = 0; r < 32; ++r) {
    const int16_t* bs = a.bsums.data() + ((i0 + r) * nb + b) * 16;
    const float dx = a.d[(i0 + r) * nb + b];
    for (int g = 0; g < 2; ++g) {
      __m512 v = _mm512_setzero_ps();
      for (int j = 0; j < 8; ++j) {
        v = _mm512_fmadd_ps(_mm512_loadu_ps(wm + j * kAmxPanel + g * 16),
                            _mm512_set1_ps(static_cast<float>(bs[2 * j] + bs[2 * j + 1])), v);
      }
      float* out = acc + r * 32 + g * 16;
      _mm512_storeu_ps(out, _mm512_fnmadd_ps(v, _mm512_set1_ps(dx), _mm512_loadu_ps(out)));
    }
  }
}

void GroupQ4K(const Q8KActs& a, int64_t i0, const uint8_t* pack, float* acc) {
  const int64_t nb = a.blocks(), k = a.k;
  alignas(64) int32_t c[4 * 256];
  std::memset(acc, 0, 32 * 32 * sizeof(float));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* sup = pack + b * kQ4KSuper;
    for (int sub = 0; sub < 8; ++sub) {
      const uint8_t* bq = sup + sub * kQ4KSub;
      TileProduct(a.q.data() + i0 * k + b * kQ8KBlock + sub * 32, k, bq, c);
      Accumulate(c, a.d.data() + i0 * nb + b, nb, reinterpret_cast<const float*>(bq + 1024), acc);
    }
    SubtractMins(a, i0, b, reinterpret_cast<const float*>(sup + 8 * kQ4KSub), acc);
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

void GroupQ6K(const Q8KActs& a, int64_t i0, const uint8_t* pack, float* acc) {
  const int64_t nb = a.blocks(), k = a.k;
  alignas(64) int32_t c[4 * 256];
  std::memset(acc, 0, 32 * 32 * sizeof(float));
  for (int64_t b = 0; b < nb; ++b) {
    for (int g = 0; g < 16; ++g) {
      const uint8_t* bq = pack + b * kQ6KSuper + g * kQ6KGroup;
      TileProduct(a.q.data() + i0 * k + b * kQ8KBlock + g * 16, k, bq, c, 256);
      Accumulate(c, a.d.data() + i0 * nb + b, nb, reinterpret_cast<const float*>(bq + 512), acc);
    }
  }
}

// WriteOut: the valid rows and columns of acc into y.
void WriteOut(const float* acc, int64_t rows, int64_t n, float* y, int64_t ldy, float beta) {
  for (int64_t r = 0; r < rows; ++r) {
    float* out = y + r * ldy;
    for (int64_t j = 0; j < n; ++j) {
      out[j] = beta == 0.0f ? acc[r * 32 + j] : acc[r * 32 + j] + beta * out[j];
    }
  }
}

}  // namespace

// The thread's tile config before AmxThreadBegin: another library in the
// process (llama.cpp's AMX kernels run on the same OpenMP threads) may have
// configured tiles once per thread and rely on keeping them.
static thread_local TileConfig saved_config;

void AmxThreadBegin(int k_bytes) {
  _tile_storeconfig(&saved_config);
  asm volatile("" : : "r"(&saved_config) : "memory");
  TileConfig cfg;
  for (int t = 0; t < 4; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  for (int t = 4; t < 6; ++t) cfg.rows[t] = 16, cfg.colsb[t] = static_cast<uint16_t>(k_bytes);
  for (int t = 6; t < 8; ++t) cfg.rows[t] = static_cast<uint8_t>(k_bytes / 4), cfg.colsb[t] = 64;
  // GCC 12's ldtilecfg builtin does not tell the optimizer that it reads
  // cfg: without this barrier the stores above are dropped as dead.
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

void AmxThreadEnd() {
  asm volatile("" : : "r"(&saved_config) : "memory");
  if (saved_config.palette != 0) {
    _tile_loadconfig(&saved_config);  // the neighbour's tiles: config restored, data zeroed
  } else {
    _tile_release();
  }
}

void Q8PanelAmx(const Q8Acts& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                int64_t ldy, float beta, uint8_t* pack) {
  Pack(w, w_row_bytes, n, a.blocks(), pack);
  alignas(64) float acc[32 * 32];
  for (int64_t i0 = 0; i0 < a.m; i0 += 32) {
    Group(a, i0, pack, acc);
    WriteOut(acc, a.m - i0 < 32 ? a.m - i0 : 32, n, y + i0 * ldy, ldy, beta);
  }
}

int64_t AmxPackBytesQ6K(int64_t k) { return (k / kQ8KBlock) * kQ6KSuper; }

void Q6KPanelAmx(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta, uint8_t* pack) {
  PackQ6K(w, w_row_bytes, n, a.blocks(), pack);
  alignas(64) float acc[32 * 32];
  for (int64_t i0 = 0; i0 < a.m; i0 += 32) {
    GroupQ6K(a, i0, pack, acc);
    WriteOut(acc, a.m - i0 < 32 ? a.m - i0 : 32, n, y + i0 * ldy, ldy, beta);
  }
}

int64_t AmxPackBytesQ4K(int64_t k) { return (k / kQ8KBlock) * kQ4KSuper; }

void Q4KPanelAmx(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                 int64_t ldy, float beta, uint8_t* pack) {
  PackQ4K(w, w_row_bytes, n, a.blocks(), pack);
  alignas(64) float acc[32 * 32];
  for (int64_t i0 = 0; i0 < a.m; i0 += 32) {
    GroupQ4K(a, i0, pack, acc);
    WriteOut(acc, a.m - i0 < 32 ? a.m - i0 : 32, n, y + i0 * ldy, ldy, beta);
  }
}

}  // namespace ragkv::kernels::internal
