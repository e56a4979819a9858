// q8_amx.cc (internal): Q8PanelAmx of q8.h on AMX-INT8 tiles (CMakeLists.txt:
// flags). Tiles: C0..C3 (tmm0-3) 16 x 16 int32, a 2 x 2 grid over 32
// activation rows x 32 weight rows; A0, A1 (tmm4-5) 16 rows x 32 int8 of
// activations; B0, B1 (tmm6-7) one q8_0 block of 16 weight rows in VNNI
// order (8 rows of 16 x 4 int8). Every block of 32 gets its own tile product
// (its scales differ), which is then scaled into an f32 accumulator.
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

// Group: 32 activation rows from i0 times the packed panel into acc.
void Group(const Q8Acts& a, int64_t i0, const uint8_t* pack, float* acc) {
  const int64_t nb = a.blocks(), k = a.k, stride = 2 * 512 + kAmxPanel * 4;
  alignas(64) int32_t c[4 * 256];
  std::memset(acc, 0, 32 * 32 * sizeof(float));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bq = pack + b * stride;
    const int8_t* x0 = a.qrow(i0) + b * kQ8Block;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, x0, k);
    _tile_loadd(5, x0 + 16 * k, k);
    _tile_loadd(6, bq, 64);
    _tile_loadd(7, bq + 512, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
    _tile_stored(0, c, 64);
    _tile_stored(1, c + 256, 64);
    _tile_stored(2, c + 512, 64);
    _tile_stored(3, c + 768, 64);
    Accumulate(c, a.drow(i0) + b, nb, reinterpret_cast<const float*>(bq + 1024), acc);
  }
}

}  // namespace

// The thread's tile config before AmxThreadBegin: another library in the
// process (llama.cpp's AMX kernels run on the same OpenMP threads) may have
// configured tiles once per thread and rely on keeping them.
static thread_local TileConfig saved_config;

void AmxThreadBegin() {
  _tile_storeconfig(&saved_config);
  asm volatile("" : : "r"(&saved_config) : "memory");
  TileConfig cfg;
  for (int t = 0; t < 4; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  for (int t = 4; t < 6; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 32;
  for (int t = 6; t < 8; ++t) cfg.rows[t] = 8, cfg.colsb[t] = 64;
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
    const int64_t rows = a.m - i0 < 32 ? a.m - i0 : 32;
    for (int64_t r = 0; r < rows; ++r) {
      float* out = y + (i0 + r) * ldy;
      for (int64_t j = 0; j < n; ++j) {
        out[j] = beta == 0.0f ? acc[r * 32 + j] : acc[r * 32 + j] + beta * out[j];
      }
    }
  }
}

}  // namespace ragkv::kernels::internal
