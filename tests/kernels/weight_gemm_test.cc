// WeightGemm on every encoding against dequantize-then-naive-matmul (double
// accumulation), on both the decode (dot) and prefill (tiled sgemm) paths
// (Q8_0: the int8 path, q8_gemm_test.cc has its exact reference),
// beta 0 and 1, every ISA this run may use.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/convert.h"
#include "kernels/ggml_quant.h"
#include "kernels/weight_gemm.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::IsaScope;
using testing::Isas;

// RandomBlocks: `rows` rows of `cols` elements of `type` with random payload
// bits and small finite f16 scales at the type's scale offsets.
std::vector<uint8_t> RandomBlocks(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const GgmlTypeInfo info = *GgmlTypeOf(static_cast<uint32_t>(type));
  const uint64_t row_bytes = *GgmlRowBytes(info, cols);
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(rows * row_bytes);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  auto put = [&](size_t off) {
    const uint16_t h = FloatToHalf(scale(rng));
    std::memcpy(&b[off], &h, 2);
  };
  if (!info.quantized) {
    for (size_t i = 0; i + 1 < b.size(); i += 2) {
      const float v = scale(rng) * ((rng() & 1) ? 1 : -1) * 10;
      const uint16_t h = type == GgmlType::kF16 ? FloatToHalf(v) : FloatToBf16(v);
      if (type == GgmlType::kF32) break;
      std::memcpy(&b[i], &h, 2);
    }
    if (type == GgmlType::kF32) {
      for (size_t i = 0; i + 3 < b.size(); i += 4) {
        const float v = scale(rng) * 10;
        std::memcpy(&b[i], &v, 4);
      }
    }
    return b;
  }
  for (size_t blk = 0; blk < b.size() / info.block_bytes; ++blk) {
    const size_t o = blk * info.block_bytes;
    switch (type) {
      case GgmlType::kQ4_1: case GgmlType::kQ5_1: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
        put(o), put(o + 2);
        break;
      case GgmlType::kQ6_K: put(o + 208); break;
      default: put(o);
    }
  }
  return b;
}

// BlockStep: the quantized encodings multiply by activations rounded to
// int8 steps of max|block| / 127 (kernels/internal/q8.h) on decode rows (m
// <= 8), and on every row with AMX or the panels: blocks of 32 for q8_0 / q4_0 / q4_1 /
// q5_0 / q5_1, of 256 for q4_K / q5_K / q6_K. Every other product uses x
// itself.
double BlockStep(GgmlType type, int64_t m, const float* row, int64_t t) {
  int block = 0;
  const bool int8 = m <= 8 || Int8PrefillActive();
  const bool b32 = type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 ||
                   type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1;
  const bool b256 = type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
  if (b32 && int8) block = 32;
  if (b256 && int8) block = 256;
  if (block == 0) return 0;
  double amax = 0;
  for (int u = 0; u < block; ++u) amax = std::max(amax, std::abs(double(row[t / block * block + u])));
  return amax / 127;
}

class WeightGemmTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(WeightGemmTest, MatchesDequantizeThenNaiveMatmul) {
  const GgmlType type = GetParam();
  const int64_t n = 300, k = 512;  // n: not a multiple of any tile
  const std::vector<uint8_t> wb = RandomBlocks(type, n, k, 3);
  absl::StatusOr<WeightMatrix> w = MakeWeightMatrix(type, wb.data(), n, k);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<float> wd(n * k);
  ASSERT_TRUE(DequantizeRows(*w, 0, n, wd.data()).ok());
  struct PanelsOn {
    ~PanelsOn() { SetVnniPanelsEnabled(true), SetVnniEnabled(true), SetAmxEnabled(true); }
  } restore;
  // Settings: 0 the panels on (int8 prefill rows where the CPU has them:
  // AMX, AVX-512 VNNI, AVX2); 1 off (prefill rows dequantize, then sgemm;
  // AMX stays on where the CPU has it); 2 AMX and VNNI hidden (the
  // AVX-512BW panels of a CPU without VNNI).
  for (int setting = 0; setting < 3; ++setting)
    for (Isa isa : Isas()) {
      const bool panels = setting != 1;
      SetVnniPanelsEnabled(panels);
      SetVnniEnabled(setting != 2);
      SetAmxEnabled(setting != 2);
      IsaScope scope(isa);
      for (int64_t m : {1, 3, 8, 9, 64}) {
        for (float beta : {0.0f, 1.0f}) {
          const std::vector<float> x = testing::RandomVec(m * k, 11 + m);
          std::vector<float> y = testing::RandomVec(m * n, 17 + m), y0 = y;
          ASSERT_TRUE(WeightGemm(TensorView::Contiguous(x.data(), DType::kF32, {m, k}), *w,
                                 TensorView::Contiguous(y.data(), DType::kF32, {m, n}), beta)
                          .ok());
          double step = 0;
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double ref = beta * y0[i * n + j], mag = std::abs(beta * y0[i * n + j]), act = 0;
              for (int64_t t = 0; t < k; ++t) {
                ref += double(x[i * k + t]) * wd[j * k + t];
                mag += std::abs(double(x[i * k + t]) * wd[j * k + t]);
                if (t % 32 == 0) step = BlockStep(type, m, &x[i * k], t);
                act += std::abs(double(wd[j * k + t])) * step;
              }
              // f32 accumulation over k = 512 terms: a few ulp of the magnitude;
              // plus x's int8 rounding where it is quantized (<= 0.6 of a step per
              // element).
              ASSERT_NEAR(y[i * n + j], ref, 1e-5 * mag + 0.6 * act + 1e-7)
                  << IsaName(isa) << " setting=" << setting << " m=" << m << " beta=" << beta
                  << " at " << i << "," << j;
            }
          }
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, WeightGemmTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                           GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                                           GgmlType::kQ5_K, GgmlType::kQ6_K),
                         [](const auto& p) {
                           return std::string(GgmlTypeOf(static_cast<uint32_t>(p.param))->name);
                         });

// DequantizeRows' vectorized block paths (q8_0, q4_K) equal the scalar
// DequantizeGgml (bit-identical to ggml's to_float: tests/llamacpp) bit for
// bit, on every ISA.
TEST_P(WeightGemmTest, DequantizeRowsIsBitExact) {
  const GgmlType type = GetParam();
  const int64_t n = 5, k = 1024;
  const std::vector<uint8_t> wb = RandomBlocks(type, n, k, 9);
  absl::StatusOr<WeightMatrix> w = MakeWeightMatrix(type, wb.data(), n, k);
  ASSERT_TRUE(w.ok());
  std::vector<float> want(n * k);
  ASSERT_TRUE(DequantizeGgml(type, wb.data(), want.data(), n * k).ok());
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    std::vector<float> got(n * k, -7.0f);
    ASSERT_TRUE(DequantizeRows(*w, 0, n, got.data()).ok());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << IsaName(isa);
  }
}

TEST(WeightGemmTest, BadShapesAreRefused) {
  std::vector<uint8_t> b(256 * 144);
  EXPECT_FALSE(MakeWeightMatrix(GgmlType::kQ4_K, b.data(), 1, 100).ok());  // not whole blocks
  EXPECT_FALSE(MakeWeightMatrix(GgmlType::kQ4_K, nullptr, 1, 256).ok());
  absl::StatusOr<WeightMatrix> w = MakeWeightMatrix(GgmlType::kQ4_K, b.data(), 4, 256);
  ASSERT_TRUE(w.ok());
  std::vector<float> x(2 * 128), y(2 * 4);
  EXPECT_FALSE(WeightGemm(TensorView::Contiguous(x.data(), DType::kF32, {2, 128}), *w,
                          TensorView::Contiguous(y.data(), DType::kF32, {2, 4}))
                   .ok());
  std::vector<float> out(256);
  EXPECT_FALSE(DequantizeRows(*w, 3, 2, out.data()).ok());
}

}  // namespace
}  // namespace ragkv::kernels
