// Q8_0 weights: activations quantized to q8_0 blocks (llama.cpp's x86 rule,
// kernels/internal/q8.h) and int8 products (and q4_K / q6_K decode rows
// with q8_K activations; every type's prefill rows on AMX or the panels:
// AVX-512 VNNI, AVX-512BW, AVX2), on every kernel this machine has (scalar,
// AVX2, VNNI, AMX, and each with VNNI / AMX hidden),
// against a naive reference written here:
// the same rule in plain scalar code, then exact int dots scaled and
// summed in double.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/convert.h"
#include "kernels/internal/q8.h"
#include "kernels/weight_gemm.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::IsaScope;
using testing::Isas;

// RandomQ8Rows: q8_0 rows with every int8 value possible (-128 included)
// and small f16 scales.
std::vector<uint8_t> RandomQ8Rows(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  std::vector<uint8_t> b(rows * cols / 32 * 34);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  for (size_t o = 0; o < b.size(); o += 34) {
    const uint16_t h = FloatToHalf(scale(rng));
    std::memcpy(&b[o], &h, 2);
  }
  return b;
}

// NaiveQuantize: one block by the documented rule.
void NaiveQuantize(const float* x, int8_t* q, float* d) {
  for (int t = 0; t < 32; ++t) {
    if (!std::isfinite(x[t])) {  // NaN or inf: q = 0, d = NaN
      std::memset(q, 0, 32);
      *d = std::numeric_limits<float>::quiet_NaN();
      return;
    }
  }
  float amax = 0;
  for (int t = 0; t < 32; ++t) amax = std::max(amax, std::fabs(x[t]));
  *d = HalfToFloat(FloatToHalf(amax / 127.0f));
  const float id = amax != 0 ? 127.0f / amax : 0.0f;
  for (int t = 0; t < 32; ++t) {
    const float v = x[t] * id, f = std::floor(v), r = v - f;
    // round half to even, spelled out
    float n = r > 0.5f ? f + 1 : r < 0.5f ? f : (std::fmod(f, 2.0f) == 0 ? f : f + 1);
    q[t] = static_cast<int8_t>(n);
  }
}

// HalvesBlock: n values whose scaled forms are exact halves: v[0] = top
// (the block's max magnitude, so the multiplier is exactly 1 when |top| =
// 127), the rest +-0.5, +-1.5, +-2.5 (round half to even: 0, +-2, +-2).
void HalvesBlock(float* v, int n, float top) {
  const float halves[] = {0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f};
  v[0] = top;
  for (int t = 1; t < n; ++t) v[t] = halves[t % 6];
}

TEST(Q8Acts, QuantizationFollowsTheRule) {
  const int64_t m = 3, k = 192;
  std::vector<float> x = testing::RandomVec(m * k, 5, -3, 3);
  for (int t = 32; t < 64; ++t) x[t] = 0.0f;  // an all-zero block
  HalvesBlock(&x[64], 32, 127.0f);             // multiplier 1: exact halves
  x[100] = std::numeric_limits<float>::quiet_NaN();  // a NaN block
  x[130] = -std::numeric_limits<float>::infinity();  // an inf block
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    internal::Q8Acts a;
    internal::QuantizeActsQ8(x.data(), m, k, k, 32, &a);
    ASSERT_EQ(a.m_pad, 32);
    for (int64_t i = 0; i < a.m_pad; ++i) {
      for (int64_t b = 0; b < k / 32; ++b) {
        int8_t q[32] = {};
        float d = 0;
        if (i < m) NaiveQuantize(x.data() + i * k + b * 32, q, &d);
        EXPECT_EQ(std::memcmp(q, a.qrow(i) + b * 32, 32), 0) << IsaName(isa) << " " << i << "," << b;
        if (std::isnan(d)) {
          EXPECT_TRUE(std::isnan(a.drow(i)[b])) << IsaName(isa) << " " << i << "," << b;
        } else {
          EXPECT_EQ(d, a.drow(i)[b]) << IsaName(isa) << " " << i << "," << b;
        }
      }
    }
  }
}

// Path: the prefill-row kernel under test (AMX tiles; the panels without
// AMX: AVX-512 VNNI under the AVX-512 cap, AVX2 under the AVX2 cap; or, all
// off, the SIMD row tiles called directly).
enum class Path { kAmx, kPanels, kTiles };
class Q8GemmTest : public ::testing::TestWithParam<Path> {};

// Features: AMX and VNNI as the CPU has them, then each turned off in turn
// (AMX off: the VNNI panels run the prefill rows; VNNI off too: the
// AVX-512BW panels and the AVX2 decode tiles of a CPU without VNNI), set by
// a scope and restored when it ends.
struct Features {
  bool amx, vnni;
};
std::vector<Features> FeatureSettings() {
  std::vector<Features> f = {{true, true}};
  if (AmxDetected()) f.push_back({false, true});
  if (VnniDetected()) f.push_back({false, false});
  return f;
}
// RowCounts: decode row counts, and prefill ones where AMX or the panels
// run them (row tails 1, 2, 3).
std::vector<int64_t> RowCounts() {
  std::vector<int64_t> ms = {1, 3, 4, 5, 8};
  if (Int8PrefillActive()) ms.insert(ms.end(), {9, 34, 103});
  return ms;
}
struct FeatureScope {
  explicit FeatureScope(Features f) { SetAmxEnabled(f.amx), SetVnniEnabled(f.vnni); }
  ~FeatureScope() { SetAmxEnabled(true), SetVnniEnabled(true); }
};

// Q8Case: n 300 / 280 leaves a last panel of 12 / 24 rows (one or two
// partial 16-column tiles); k 544 is an odd number of blocks (the AMX
// pipeline's odd exit); x and y rows are strided (ldx = k + 32, ldy = n + 5).
struct Q8Shape {
  int64_t n, k;
};

void CheckQ8(const Q8Shape& shape, const char* path) {
  const int64_t n = shape.n, k = shape.k, ldx = k + 32, ldy = n + 5;
  const std::vector<uint8_t> wb = RandomQ8Rows(n, k, 3);
  absl::StatusOr<WeightMatrix> w = MakeWeightMatrix(GgmlType::kQ8_0, wb.data(), n, k);
  ASSERT_TRUE(w.ok()) << w.status();
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (int64_t m : {1, 3, 8, 9, 34, 103}) {
      for (float beta : {0.0f, 1.0f}) {
        const std::vector<float> x = testing::RandomVec(m * ldx, 11 + m, -2, 2);
        std::vector<float> y = testing::RandomVec(m * ldy, 17 + m), y0 = y;
        TensorView xv = TensorView::Contiguous(const_cast<float*>(x.data()), DType::kF32, {m, k});
        TensorView yv = TensorView::Contiguous(y.data(), DType::kF32, {m, n});
        xv.stride[0] = ldx;
        yv.stride[0] = ldy;
        if (m <= 8 || Int8PrefillActive()) {  // what WeightGemm sends to the int8 path
          ASSERT_TRUE(WeightGemm(xv, *w, yv, beta).ok());
        } else {  // the SIMD tile on prefill rows, called directly
          internal::Q8Acts a;
          internal::QuantizeActsQ8(x.data(), m, ldx, k, 1, &a);
          internal::ActiveQ8Tile()(a, GgmlType::kQ8_0, 0, m, wb.data(), w->row_bytes, n, y.data(), ldy, beta);
        }
        for (int64_t i = 0; i < m; ++i) {
          std::vector<int8_t> q(k);
          std::vector<float> d(k / 32);
          for (int64_t b = 0; b < k / 32; ++b) NaiveQuantize(&x[i * ldx + b * 32], &q[b * 32], &d[b]);
          for (int64_t j = 0; j < n; ++j) {
            double ref = beta * y0[i * ldy + j], mag = std::abs(ref);
            for (int64_t b = 0; b < k / 32; ++b) {
              const uint8_t* blk = &wb[(j * k / 32 + b) * 34];
              uint16_t h;
              std::memcpy(&h, blk, 2);
              int dot = 0;
              for (int t = 0; t < 32; ++t) dot += q[b * 32 + t] * int8_t(blk[2 + t]);
              const double s = double(float(d[b] * HalfToFloat(h)));
              ref += s * dot;
              mag += std::abs(s * dot);
            }
            // int dots exact; f32 sums of the scaled block sums (+ beta y).
            ASSERT_NEAR(y[i * ldy + j], ref, 2e-6 * mag + 1e-7)
                << IsaName(isa) << " path=" << path << " n=" << n << " k=" << k << " m=" << m
                << " beta=" << beta << " at " << i << "," << j;
          }
          for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], y0[i * ldy + j]);
        }
      }
    }
  }
}

TEST_P(Q8GemmTest, MatchesTheNaiveInt8Reference) {
  const Path path = GetParam();
  if (path == Path::kAmx && !AmxDetected()) GTEST_SKIP() << "no AMX-INT8 here";
  struct Restore {
    ~Restore() { SetAmxEnabled(true), SetVnniPanelsEnabled(true), SetVnniEnabled(true); }
  } restore;
  SetAmxEnabled(path == Path::kAmx);
  SetVnniPanelsEnabled(path == Path::kPanels);
  if (path == Path::kPanels && DetectedIsa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 here";
  const char* name = path == Path::kAmx ? "amx" : path == Path::kPanels ? "panels" : "tiles";
  for (bool vnni : {true, false}) {  // off: the AVX-512BW panels where the CPU has VNNI
    if (!vnni && !VnniDetected()) continue;
    SetVnniEnabled(vnni);
    for (const Q8Shape& shape : {Q8Shape{300, 512}, Q8Shape{280, 544}}) CheckQ8(shape, name);
  }
  SetVnniEnabled(true);
}

INSTANTIATE_TEST_SUITE_P(Paths, Q8GemmTest,
                         ::testing::Values(Path::kAmx, Path::kPanels, Path::kTiles),
                         [](const auto& p) {
                           return p.param == Path::kAmx      ? "amx"
                                  : p.param == Path::kPanels ? "panels"
                                                             : "tiles";
                         });

// RandomKRows: q4_K / q5_K (d, dmin at 0, 2) or q6_K (d at 208) rows:
// random quant and scale bits, small f16 super-block scales.
std::vector<uint8_t> RandomKRows(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const int bytes = type == GgmlType::kQ4_K ? 144 : type == GgmlType::kQ5_K ? 176 : 210;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.0005f, 0.005f);
  std::vector<uint8_t> b(rows * cols / 256 * bytes);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  auto put = [&](size_t off) {
    const uint16_t h = FloatToHalf(scale(rng));
    std::memcpy(&b[off], &h, 2);
  };
  for (size_t o = 0; o < b.size(); o += bytes) {
    if (type == GgmlType::kQ6_K) put(o + 208);
    else put(o), put(o + 2);
  }
  return b;
}

// NaiveQuantizeK: one q8_K block of 256 by the documented rule.
void NaiveQuantizeK(const float* x, int8_t* q, float* d) {
  std::memset(q, 0, 256);
  for (int t = 0; t < 256; ++t) {
    if (!std::isfinite(x[t])) {  // NaN or inf: q = 0, d = NaN
      *d = std::numeric_limits<float>::quiet_NaN();
      return;
    }
  }
  float amax = 0, max = 0;
  for (int t = 0; t < 256; ++t) {
    if (std::fabs(x[t]) > amax) amax = std::fabs(x[t]), max = x[t];
  }
  *d = 0;
  std::memset(q, 0, 256);
  if (amax == 0) return;
  const float iscale = -127.0f / max;
  for (int t = 0; t < 256; ++t) {
    const float v = iscale * x[t], f = std::floor(v), r = v - f;
    const float n = r > 0.5f ? f + 1 : r < 0.5f ? f : (std::fmod(f, 2.0f) == 0 ? f : f + 1);
    q[t] = static_cast<int8_t>(std::min(127.0f, n));
  }
  *d = 1.0f / iscale;
}

TEST(Q8KActs, QuantizationFollowsTheRule) {
  const int64_t m = 2, k = 1536;
  std::vector<float> x = testing::RandomVec(m * k, 7, -3, 3);
  for (int t = 256; t < 512; ++t) x[t] = 0.0f;  // an all-zero block
  x[520] = -5.0f, x[700] = 5.0f;                 // equal magnitudes: the first one sets the sign
  HalvesBlock(&x[768], 256, -127.0f);            // iscale = 1: exact halves
  x[1030] = std::numeric_limits<float>::quiet_NaN();   // a NaN block...
  x[1040] = 50.0f;                                      // ...whose max follows the NaN
  x[1300] = std::numeric_limits<float>::infinity();    // an inf block
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    internal::Q8KActs a;
    internal::QuantizeActsQ8K(x.data(), m, k, k, 32, &a);
    ASSERT_EQ(a.m_pad, 32);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t b = 0; b < k / 256; ++b) {
        int8_t q[256];
        float d;
        NaiveQuantizeK(&x[i * k + b * 256], q, &d);
        EXPECT_EQ(std::memcmp(q, a.q.data() + i * k + b * 256, 256), 0) << IsaName(isa) << " " << i << "," << b;
        if (std::isnan(d)) {
          EXPECT_TRUE(std::isnan(a.d[i * 6 + b])) << IsaName(isa) << " " << i << "," << b;
        } else {
          EXPECT_EQ(d, a.d[i * 6 + b]) << IsaName(isa) << " " << i << "," << b;
        }
        for (int g = 0; g < 16; ++g) {
          int sum = 0;
          for (int t = 0; t < 16; ++t) sum += q[g * 16 + t];
          EXPECT_EQ(sum, a.bsums[(i * 6 + b) * 16 + g]) << IsaName(isa) << " " << i << "," << b;
        }
      }
    }
  }
}

class QKGemmTest : public ::testing::TestWithParam<GgmlType> {};

// Decode rows of q4_K / q5_K / q6_K on every ISA (and prefill rows on
// AMX): int8 products with q8_K activations vs the dequantized
// weights (ggml's to_float) times the naively quantized x.
TEST_P(QKGemmTest, DecodeRowsMatchTheNaiveInt8Reference) {
  const GgmlType type = GetParam();
  const int64_t k = 768;  // 3 super-blocks
  for (int64_t n : {300, 280}) {  // last panel: 12 / 24 rows
  const std::vector<uint8_t> wb = RandomKRows(type, n, k, 5);
  absl::StatusOr<WeightMatrix> w = MakeWeightMatrix(type, wb.data(), n, k);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<float> wd(n * k);
  ASSERT_TRUE(DequantizeRows(*w, 0, n, wd.data()).ok());
  for (Features f : FeatureSettings())
    for (Isa isa : Isas()) {
      FeatureScope feature_scope(f);
      IsaScope scope(isa);
      for (int64_t m : RowCounts()) {
        for (float beta : {0.0f, 1.0f}) {
          std::vector<float> x = testing::RandomVec(m * k, 23 + m, -2, 2);
          for (int t = 256; t < 512; ++t) x[t] = 0;  // row 0, block 1: all zero
          std::vector<float> y = testing::RandomVec(m * n, 29 + m), y0 = y;
          ASSERT_TRUE(WeightGemm(TensorView::Contiguous(x.data(), DType::kF32, {m, k}), *w,
                                 TensorView::Contiguous(y.data(), DType::kF32, {m, n}), beta)
                          .ok());
          for (int64_t i = 0; i < m; ++i) {
            std::vector<int8_t> q(k);
            std::vector<float> d(k / 256);
            for (int64_t b = 0; b < k / 256; ++b)
              NaiveQuantizeK(&x[i * k + b * 256], &q[b * 256], &d[b]);
            for (int64_t j = 0; j < n; ++j) {
              double ref = beta * y0[i * n + j], mag = std::abs(ref);
              for (int64_t t = 0; t < k; ++t) {
                const double xv = double(d[t / 256]) * q[t];
                ref += xv * wd[j * k + t];
                mag += std::abs(xv) * (std::abs(wd[j * k + t]) + 0.02);  // + dmin * 63 terms
              }
              // ints exact; f32 scale products and a few sums per super-block.
              ASSERT_NEAR(y[i * n + j], ref, 1e-5 * mag + 1e-7)
                  << IsaName(isa) << " amx " << f.amx << " vnni " << f.vnni << " n=" << n
                  << " m=" << m << " beta=" << beta << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QKGemmTest,
                         ::testing::Values(GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K),
                         [](const auto& p) {
                           return std::string(GgmlTypeOf(static_cast<uint32_t>(p.param))->name);
                         });

// A block of x holding NaN or inf turns its row's products into NaN on the
// prefill panels too (q8.h: q = 0, d = NaN), and leaves the other rows
// finite: q8_0 (blocks of 32) and q4_K / q6_K (super-blocks of 256), on
// every panel this machine has.
TEST(Int8Panels, ANonFiniteBlockMakesItsRowNaN) {
  int checked = 0;
  for (Features f : FeatureSettings())
    for (Isa isa : Isas()) {
      FeatureScope feature_scope(f);
      IsaScope scope(isa);
      if (!Int8PrefillActive()) continue;
      ++checked;
      for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
        const int64_t n = 40, k = 512, m = 11;
        const std::vector<uint8_t> wb =
            type == GgmlType::kQ8_0 ? RandomQ8Rows(n, k, 7) : RandomKRows(type, n, k, 7);
        absl::StatusOr<WeightMatrix> w = MakeWeightMatrix(type, wb.data(), n, k);
        ASSERT_TRUE(w.ok()) << w.status();
        for (float bad :
             {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
          std::vector<float> x = testing::RandomVec(m * k, 41, -2, 2), y(m * n, 0.0f);
          x[5 * k + 300] = bad;  // row 5
          ASSERT_TRUE(WeightGemm(TensorView::Contiguous(x.data(), DType::kF32, {m, k}), *w,
                                 TensorView::Contiguous(y.data(), DType::kF32, {m, n}), 0.0f)
                          .ok());
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              if (i == 5) {
                ASSERT_TRUE(std::isnan(y[i * n + j]))
                    << int(type) << " " << IsaName(isa) << " at " << i << "," << j;
              } else {
                ASSERT_TRUE(std::isfinite(y[i * n + j]))
                    << int(type) << " " << IsaName(isa) << " at " << i << "," << j;
              }
            }
          }
        }
      }
    }
  if (checked == 0) GTEST_SKIP() << "no int8 prefill panels here";
}

// The panels' int16 steps at their limits (q8_panel_maddubs.inc): every
// activation code at +-127 (x all +-1.5) against weight rows whose codes are
// all at one end of their range (q8_0 -128 or 127, the sign trick's worst
// pair 2 x 128 x 127; q6_K and q5_0 at both ends, biased to 63 / 31 and to
// 0), so a saturating pair or a wrong bias shows as an error of ~1%. On every
// ISA and feature setting (the AVX2 panels under the AVX2 cap, the
// AVX-512BW ones with VNNI hidden), against the dequantized weights
// times the naively quantized x.
TEST(Int8Panels, ExtremeCodesAndActivationsStayExact) {
  struct Restore {
    ~Restore() { SetVnniPanelsEnabled(true); }
  } restore;
  SetVnniPanelsEnabled(true);
  const int64_t n = 40, k = 512, m = 12;
  int checked = 0;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ6_K, GgmlType::kQ5_0}) {
    const GgmlTypeInfo info = *GgmlTypeOf(static_cast<uint32_t>(type));
    const int64_t bpr = k / info.block_elems * info.block_bytes;
    std::vector<uint8_t> wb(n * bpr);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t o = 0; o < bpr; o += info.block_bytes) {
        uint8_t* blk = &wb[j * bpr + o];
        const uint16_t h = FloatToHalf(0.01f);
        if (type == GgmlType::kQ8_0) {  // d, then 32 codes
          std::memcpy(blk, &h, 2);
          std::memset(blk + 2, j % 2 == 0 ? 0x80 : 0x7F, 32);
        } else if (type == GgmlType::kQ6_K) {  // ql, qh, 16 int8 scales, d
          std::memset(blk, j % 2 == 0 ? 0xFF : 0x00, 192);
          std::memset(blk + 192, 100, 16);
          std::memcpy(blk + 208, &h, 2);
        } else {  // q5_0: d, qh (4 bytes), 16 nibble bytes
          std::memcpy(blk, &h, 2);
          std::memset(blk + 2, j % 2 == 0 ? 0xFF : 0x00, 20);
        }
      }
    }
    absl::StatusOr<WeightMatrix> w = MakeWeightMatrix(type, wb.data(), n, k);
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<float> wd(n * k);
    ASSERT_TRUE(DequantizeRows(*w, 0, n, wd.data()).ok());
    std::vector<float> x(m * k);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t t = 0; t < k; ++t)
        x[i * k + t] = (i % 3 == 2 ? (t % 2 == 0 ? 1.5f : -1.5f) : i % 3 == 0 ? 1.5f : -1.5f);
    }
    // Every x code is +-127 under both rules; d_x is q8_0's f16 scale or
    // q8_K's f32 one.
    const int block = type == GgmlType::kQ6_K ? 256 : 32;
    std::vector<int8_t> q(m * k);
    std::vector<float> d(m * k / 32);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t b = 0; b < k / block; ++b) {
        const int64_t at = i * k + b * block;
        if (block == 32) NaiveQuantize(&x[at], &q[at], &d[i * k / 32 + b]);
        if (block == 256) NaiveQuantizeK(&x[at], &q[at], &d[i * k / 32 + b]);
      }
    }
    for (Features f : FeatureSettings())
      for (Isa isa : Isas()) {
        FeatureScope feature_scope(f);
        IsaScope scope(isa);
        if (!Int8PrefillActive()) continue;  // prefill rows dequantize (x unrounded)
        ++checked;
        std::vector<float> y(m * n, 0.0f);
        ASSERT_TRUE(WeightGemm(TensorView::Contiguous(x.data(), DType::kF32, {m, k}), *w,
                               TensorView::Contiguous(y.data(), DType::kF32, {m, n}), 0.0f)
                        .ok());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t t = 0; t < k; ++t) {
              const double xv = double(d[i * k / 32 + t / block]) * q[i * k + t];
              ref += xv * wd[j * k + t];
              mag += std::abs(xv * wd[j * k + t]);
            }
            ASSERT_NEAR(y[i * n + j], ref, 1e-5 * mag + 1e-6)
                << info.name << " " << IsaName(isa) << " amx " << f.amx << " vnni " << f.vnni
                << " at " << i << "," << j;
          }
        }
      }
  }
  if (checked == 0) GTEST_SKIP() << "no int8 prefill panels here";
}

// RandomBlock32Rows: rows of a block-32 encoding: random code bits, small
// f16 d (and m, signed, for q4_1 / q5_1) at offsets 0 (and 2).
std::vector<uint8_t> RandomBlock32Rows(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const GgmlTypeInfo info = *GgmlTypeOf(static_cast<uint32_t>(type));
  const bool mins = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  std::vector<uint8_t> b(rows * cols / 32 * info.block_bytes);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  auto put = [&](size_t off, float v) {
    const uint16_t h = FloatToHalf(v);
    std::memcpy(&b[off], &h, 2);
  };
  for (size_t o = 0; o < b.size(); o += info.block_bytes) {
    put(o, scale(rng));
    if (mins) put(o + 2, -8 * scale(rng));
  }
  return b;
}

class Block32GemmTest : public ::testing::TestWithParam<GgmlType> {};

// Rows of q4_0 / q4_1 / q5_0 / q5_1: decode rows on every ISA (scalar,
// AVX2, AVX-512 VNNI tiles) and prefill rows on AMX or the panels (AVX-512
// VNNI, AVX-512BW, AVX2): int8 products with
// q8_0 activations (the mins term from d_x * sum(q_x)) vs the dequantized
// weights (ggml's to_float) times the naively quantized x. k = 544: an odd
// number of blocks; n = 300 / 280: partial last tiles and panels; x and y
// strided.
void CheckBlock32(GgmlType type, int64_t n, int64_t m, const WeightMatrix& w,
                  const std::vector<float>& wd, const std::string& where) {
  const int64_t k = w.cols, ldx = k + 32, ldy = n + 5;
  for (float beta : {0.0f, 1.0f}) {
    std::vector<float> x = testing::RandomVec(m * ldx, 31 + m, -2, 2);
    for (int t = 64; t < 96; ++t) x[t] = 0;  // row 0, block 2: all zero
    std::vector<float> y = testing::RandomVec(m * ldy, 37 + m), y0 = y;
    TensorView xv = TensorView::Contiguous(x.data(), DType::kF32, {m, k});
    TensorView yv = TensorView::Contiguous(y.data(), DType::kF32, {m, n});
    xv.stride[0] = ldx;
    yv.stride[0] = ldy;
    ASSERT_TRUE(WeightGemm(xv, w, yv, beta).ok());
    for (int64_t i = 0; i < m; ++i) {
      std::vector<int8_t> q(k);
      std::vector<float> d(k / 32);
      for (int64_t b = 0; b < k / 32; ++b) NaiveQuantize(&x[i * ldx + b * 32], &q[b * 32], &d[b]);
      for (int64_t j = 0; j < n; ++j) {
        double ref = beta * y0[i * ldy + j], mag = std::abs(ref);
        for (int64_t t = 0; t < k; ++t) {
          const double xv = double(d[t / 32]) * q[t];
          ref += xv * wd[j * k + t];
          mag += std::abs(xv * wd[j * k + t]);
        }
        // ints exact; f32 scale products and one sum per block.
        ASSERT_NEAR(y[i * ldy + j], ref, 1e-5 * mag + 1e-7)
            << where << " n=" << n << " m=" << m << " beta=" << beta << " at " << i << "," << j;
      }
      for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], y0[i * ldy + j]);
    }
  }
}

TEST_P(Block32GemmTest, RowsMatchTheNaiveInt8Reference) {
  const GgmlType type = GetParam();
  const int64_t k = 544;
  for (int64_t n : {300, 280}) {
    const std::vector<uint8_t> wb = RandomBlock32Rows(type, n, k, 5);
    absl::StatusOr<WeightMatrix> w = MakeWeightMatrix(type, wb.data(), n, k);
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<float> wd(n * k);
    ASSERT_TRUE(DequantizeRows(*w, 0, n, wd.data()).ok());
    for (Features f : FeatureSettings())
      for (Isa isa : Isas()) {
        FeatureScope feature_scope(f);
        IsaScope scope(isa);
        for (int64_t m : RowCounts()) {
          CheckBlock32(type, n, m, *w, wd,
                       absl::StrCat(IsaName(isa), " amx ", f.amx, " vnni ", f.vnni));
          if (HasFatalFailure()) return;
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Block32GemmTest,
                         ::testing::Values(GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                           GgmlType::kQ5_1),
                         [](const auto& p) {
                           return std::string(GgmlTypeOf(static_cast<uint32_t>(p.param))->name);
                         });

}  // namespace
}  // namespace ragkv::kernels
