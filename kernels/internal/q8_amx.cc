// q8_amx.cc (internal): the AMX tile config and Q8PanelAmx of q8.h
// (CMakeLists.txt: flags; the step loop: amx_tiles.h; the panels: panel.h). Blocks of 32 (q8_0,
// q4_0, q4_1, q5_0, q5_1): the weight codes unpacked to int8 in the packed
// panel, one step per block with scale d_x * d_w, plus m_w * d_x * sum(q_x)
// per block for the encodings with a min (llama.cpp's q8_1 product).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/internal/amx_tiles.h"
#include "kernels/internal/panel.h"
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

// AddMins: acc[r] += m_j * s[r] over the blocks, for 16 rows from i0 and
// columns g * 16.. (the q4_1 / q5_1 mins term).
void AddMins(const Q8Acts& a, const uint8_t* pack, int64_t i0, int64_t g, __m512 acc[16]) {
  const int64_t nb = a.blocks();
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 m = _mm512_loadu_ps(
        reinterpret_cast<const float*>(pack + b * kBlock32Stride + 1024) + kAmxPanel + g * 16);
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.s[(i0 + r) * nb + b]), acc[r]);
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

void Q8PanelAmx(const Q8Acts& a, GgmlType type, const uint8_t* w, uint64_t w_row_bytes, int64_t n,
                float* y, int64_t ldy, float beta, uint8_t* pack) {
  const int64_t nb = a.blocks(), k = a.k;
  const bool mins = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  PackBlock32(type, w, w_row_bytes, n, nb, pack);
  amx::Panel(a.m, n, y, ldy, beta, [&](int64_t i0, int64_t g, __m512* acc) {
    amx::Run(nb, k, nb, [&](int64_t b) {
      const uint8_t* bq = pack + b * kBlock32Stride;
      return amx::Step{a.qrow(i0) + b * kQ8Block, bq + g * 512,
                       reinterpret_cast<const float*>(bq + 1024) + g * 16, a.drow(i0) + b};
    }, acc);
    if (mins) AddMins(a, pack, i0, g, acc);
  });
}

}  // namespace ragkv::kernels::internal
