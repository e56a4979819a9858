// q8k.cc (internal): q8_K activations and the scalar q4_K / q5_K / q6_K tiles of
// q8.h (the AVX2 twins: q8k_avx2.cc).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu.h"
#include "kernels/internal/isa.h"
#include "kernels/internal/q8.h"

namespace ragkv::kernels::internal {
namespace {

void QuantizeBlockK(const float* x, int8_t* q, float* d, int16_t* bsums) {
  float amax = 0.0f, max = 0.0f;
  bool finite = true;
  for (int t = 0; t < kQ8KBlock; ++t) {
    finite = finite && std::isfinite(x[t]);
    if (std::fabs(x[t]) > amax) amax = std::fabs(x[t]), max = x[t];
  }
  if (amax == 0.0f || !finite) {  // NaN / inf: q = 0, d = NaN (q8.h)
    std::memset(q, 0, kQ8KBlock);
    std::memset(bsums, 0, kQ8KBlock / 16 * sizeof(int16_t));
    *d = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float iscale = -127.0f / max;
  for (int t = 0; t < kQ8KBlock; ++t) {
    q[t] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * x[t])));
  }
  for (int g = 0; g < kQ8KBlock / 16; ++g) {
    int sum = 0;
    for (int t = 0; t < 16; ++t) sum += q[g * 16 + t];
    bsums[g] = static_cast<int16_t>(sum);
  }
  *d = 1.0f / iscale;
}

// Q4KScalesMins: the 8 6-bit scales and mins of a q4_K block (ggml's
// get_scale_min_k4).
void Q4KScalesMins(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 8; ++j) {
    sc[j] = j < 4 ? (s[j] & 63) : ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    mn[j] = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q45KBlock: one q4_K block (144 bytes; q5 false) or q5_K block (176
// bytes: the fifth bits qh at +16, the nibbles at +48) times 256 q8_K values.
template <bool q5>
float Q45KBlock(const uint8_t* b, const int8_t* x, float dx, const int16_t* bsums) {
  int sc[8], mn[8];
  Q4KScalesMins(b + 4, sc, mn);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (q5 ? 48 : 16);
  int32_t sumi = 0, summs = 0;
  for (int c = 0; c < 4; ++c, qs += 32) {
    int32_t lo = 0, hi = 0;
    for (int t = 0; t < 32; ++t) {
      const int lo5 = q5 ? ((qh[t] >> (2 * c)) & 1) << 4 : 0;
      const int hi5 = q5 ? ((qh[t] >> (2 * c + 1)) & 1) << 4 : 0;
      lo += ((qs[t] & 0xF) | lo5) * x[c * 64 + t];
      hi += ((qs[t] >> 4) | hi5) * x[c * 64 + 32 + t];
    }
    sumi += sc[2 * c] * lo + sc[2 * c + 1] * hi;
  }
  for (int j = 0; j < 8; ++j) summs += mn[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return dx * Q8HalfAt(b) * static_cast<float>(sumi) - dx * Q8HalfAt(b + 2) * static_cast<float>(summs);
}

// Q6KBlock: one q6_K block (210 bytes) times 256 q8_K values.
float Q6KBlock(const uint8_t* b, const int8_t* x, float dx, const int16_t* bsums) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  int32_t sumi = 0;
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, x += 128) {
    int32_t dots[8] = {};
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      dots[is + 0] += ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) * x[l];
      dots[is + 2] += ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) * x[l + 32];
      dots[is + 4] += ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) * x[l + 64];
      dots[is + 6] += ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) * x[l + 96];
    }
    for (int g = 0; g < 8; ++g) sumi += sc[g] * (dots[g] - 32 * bsums[half * 8 + g]);
  }
  return dx * Q8HalfAt(b + 208) * static_cast<float>(sumi);
}

template <float (*Block)(const uint8_t*, const int8_t*, float, const int16_t*), int kBytes>
void Tile(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
          int64_t ldy, float beta) {
  const int64_t nb = a.blocks();
  for (int64_t i = 0; i < a.m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wr = w + j * w_row_bytes;
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        sum += Block(wr + b * kBytes, a.q.data() + i * a.k + b * kQ8KBlock, a.d[i * nb + b],
                     a.bsums.data() + (i * nb + b) * 16);
      }
      float& out = y[i * ldy + j];
      out = beta == 0.0f ? sum : sum + beta * out;
    }
  }
}

}  // namespace

void QuantizeActsQ8K(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t pad, Q8KActs* a) {
  a->m = m;
  a->k = k;
  a->m_pad = (m + pad - 1) / pad * pad;
  const int64_t nb = k / kQ8KBlock;
  a->q.assign(static_cast<size_t>(a->m_pad * k), 0);
  a->d.assign(static_cast<size_t>(a->m_pad * nb), 0.0f);
  a->bsums.assign(static_cast<size_t>(a->m_pad * nb * 16), 0);
  a->dbsums.assign(static_cast<size_t>(a->m_pad * nb * 8), 0.0f);
  const int threads = static_cast<int>(std::clamp<int64_t>(m * k / 65536, 1, MaxThreads()));
  const auto block = ActiveIsa() == Isa::kScalar ? QuantizeBlockK : QuantizeBlockQ8KAvx2;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      block(x + i * ldx + b * kQ8KBlock, a->q.data() + i * k + b * kQ8KBlock,
                     a->d.data() + i * nb + b, a->bsums.data() + (i * nb + b) * 16);
    }
  }
  for (int64_t r = 0; r < m * nb; ++r) {
    const int16_t* bs = a->bsums.data() + r * 16;
    for (int j = 0; j < 8; ++j) {
      a->dbsums[r * 8 + j] = a->d[r] * static_cast<float>(bs[2 * j] + bs[2 * j + 1]);
    }
  }
}

void Q4KTileScalar(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                   int64_t ldy, float beta) {
  Tile<Q45KBlock<false>, 144>(a, w, w_row_bytes, n, y, ldy, beta);
}

void Q5KTileScalar(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                   int64_t ldy, float beta) {
  Tile<Q45KBlock<true>, 176>(a, w, w_row_bytes, n, y, ldy, beta);
}

void Q6KTileScalar(const Q8KActs& a, const uint8_t* w, uint64_t w_row_bytes, int64_t n, float* y,
                   int64_t ldy, float beta) {
  Tile<Q6KBlock, 210>(a, w, w_row_bytes, n, y, ldy, beta);
}

QKTileFn ActiveQKTile(GgmlType type) {
  const bool scalar = ActiveIsa() == Isa::kScalar;
  switch (type) {
    case GgmlType::kQ6_K: return scalar ? Q6KTileScalar : Q6KTileAvx2;
    case GgmlType::kQ5_K: return scalar ? Q5KTileScalar : Q5KTileAvx2;
    default: return scalar ? Q4KTileScalar : Q4KTileAvx2;
  }
}

}  // namespace ragkv::kernels::internal
