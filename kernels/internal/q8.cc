#include "kernels/internal/q8.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu.h"
#include "kernels/internal/isa.h"
#include "kernels/internal/panel.h"

namespace ragkv::kernels::internal {
namespace {

// QuantizeBlock: one block of 32 by llama.cpp's x86 rule (q8.h).
// A block holding NaN or inf gets q = 0 and d = NaN (q8.h), so it turns
// its products into NaN on every kernel.
void QuantizeBlock(const float* x, int8_t* q, float* d) {
  float amax = 0.0f;
  for (int t = 0; t < kQ8Block; ++t) {
    if (!std::isfinite(x[t])) {
      std::memset(q, 0, kQ8Block);
      *d = std::numeric_limits<float>::quiet_NaN();
      return;
    }
    amax = std::max(amax, std::fabs(x[t]));
  }
  *d = HalfBitsToFloat(FloatToHalfBits(amax / 127.0f));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int t = 0; t < kQ8Block; ++t) q[t] = static_cast<int8_t>(std::nearbyint(x[t] * id));
}

}  // namespace

void QuantizeActsQ8(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t pad, Q8Acts* a) {
  a->m = m;
  a->k = k;
  a->m_pad = (m + pad - 1) / pad * pad;
  const int64_t nb = k / kQ8Block;
  a->q.resize(static_cast<size_t>(a->m_pad * k));
  a->d.resize(static_cast<size_t>(a->m_pad * nb));
  std::fill(a->q.begin() + m * k, a->q.end(), int8_t{0});
  std::fill(a->d.begin() + m * nb, a->d.end(), 0.0f);
  const int threads = static_cast<int>(std::clamp<int64_t>(m * k / 65536, 1, MaxThreads()));
  const auto block = ActiveIsa() == Isa::kScalar ? QuantizeBlock : QuantizeBlockQ8Avx2;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      block(x + i * ldx + b * kQ8Block, a->q.data() + i * k + b * kQ8Block,
                    a->d.data() + i * nb + b);
    }
  }
}

void SumActsQ8(Q8Acts* a) {
  const int64_t nb = a->blocks(), rows = a->m_pad;
  a->s.assign(static_cast<size_t>(rows * nb), 0.0f);
  const int threads = static_cast<int>(std::clamp<int64_t>(a->m * a->k / 65536, 1, MaxThreads()));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < a->m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* q = a->qrow(i) + b * kQ8Block;
      int sum = 0;
      for (int t = 0; t < kQ8Block; ++t) sum += q[t];
      a->s[i * nb + b] = a->d[i * nb + b] * static_cast<float>(sum);
    }
  }
}

namespace {

// UnpackBlock: one block of `type` (Block32) as 32 int8 values, its scale
// and min (0 without one): the scalar twin of block32.inc's Unpack32.
int64_t UnpackBlock(GgmlType type, const uint8_t* blk, int8_t* v, float* d, float* m) {
  *d = Q8HalfAt(blk);
  *m = 0.0f;
  if (type == GgmlType::kQ8_0) {
    std::memcpy(v, blk + 2, kQ8Block);
    return kQ8BlockBytes;
  }
  const bool has_min = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  const bool five = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1;
  if (has_min) *m = Q8HalfAt(blk + 2);
  const uint8_t* p = blk + (has_min ? 4 : 2);
  uint32_t qh = 0;
  if (five) std::memcpy(&qh, p, 4), p += 4;
  const int offset = has_min ? 0 : (five ? 16 : 8);
  for (int t = 0; t < 16; ++t) {
    const int lo = (p[t] & 0xF) | (five ? ((qh >> t) & 1) << 4 : 0);
    const int hi = (p[t] >> 4) | (five ? ((qh >> (t + 16)) & 1) << 4 : 0);
    v[t] = static_cast<int8_t>(lo - offset);
    v[t + 16] = static_cast<int8_t>(hi - offset);
  }
  return (p - blk) + 16;
}

}  // namespace

void Q8TileScalar(const Q8Acts& a, GgmlType type, int64_t i0, int64_t m, const uint8_t* w,
                  uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta) {
  const int64_t nb = a.blocks();
  const bool mins = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  int8_t wq[kQ8Block];
  for (int64_t i = 0; i < m; ++i) {
    const int8_t* xq = a.qrow(i0 + i);
    const float* xd = a.drow(i0 + i);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wr = w + j * w_row_bytes;
      float sum = 0.0f, min_sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        float dw, mw;
        wr += UnpackBlock(type, wr, wq, &dw, &mw);
        int32_t dot = 0;
        for (int t = 0; t < kQ8Block; ++t) dot += int32_t{xq[b * kQ8Block + t]} * wq[t];
        sum += (xd[b] * dw) * static_cast<float>(dot);
        if (mins) min_sum += mw * a.s[(i0 + i) * nb + b];
      }
      sum += min_sum;
      float& out = y[i * ldy + j];
      out = beta == 0.0f ? sum : sum + beta * out;
    }
  }
}

// ZeroPointSums (panel.h) lives here, compiled for the baseline ISA: the
// std::vector it sizes must not be instantiated in an AVX-512 translation
// unit (docs/kernels.md, "ISA dispatch").
void ZeroPointSums(const int8_t* q, int64_t rows, int64_t k, int step, std::vector<int32_t>* out) {
  const int64_t steps = k / step;
  out->resize(static_cast<size_t>(rows * steps));
  int32_t* o = out->data();
  const int threads = static_cast<int>(std::clamp<int64_t>(rows * k / 65536, 1, MaxThreads()));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t s = 0; s < steps; ++s) {
      const int8_t* p = q + i * k + s * step;
      int32_t sum = 0;
      for (int t = 0; t < step; ++t) sum += p[t];
      o[i * steps + s] = -128 * sum;
    }
  }
}

Q8TileFn ActiveQ8Tile() {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return VnniActive() ? Q8TileVnni : Q8TileAvx2;
    case Isa::kAvx2: return Q8TileAvx2;
    case Isa::kScalar: break;
  }
  return Q8TileScalar;
}

}  // namespace ragkv::kernels::internal
