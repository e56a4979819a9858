// q8k_amx.cc (internal): Q4KPanelAmx and Q6KPanelAmx of q8.h (CMakeLists.txt:
// flags; the step loop: amx_tiles.h). q4_K / q5_K: one step per sub-block
// of 32 (4- or 5-bit codes unpacked to int8 in the packed panel, scale d_x *
// d_w sc_j), the mins term once per super-block; q6_K: one step per group of 16 (q - 32 as
// int8, scale d_x * d_w sc_g; tiles begun with K = 16 bytes).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/internal/amx_tiles.h"
#include "kernels/internal/panel.h"
#include "kernels/internal/q8.h"

namespace ragkv::kernels::internal {
namespace {

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
