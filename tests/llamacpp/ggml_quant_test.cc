// ragkv's ggml dequantization (kernels/ggml_quant.h) against ggml's own
// to_float from the pinned libggml-base, on blocks made by ggml's own
// reference quantizer: bit-exact for every type ragkv reads.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ggml_quant.h"
#include "tests/support/llamacpp_oracle.h"

namespace ragkv::kernels {
namespace {

std::vector<float> Weights(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  // A few outliers, as trained weights have: they drive the block scales.
  for (int64_t i = 7; i < n; i += 97) v[i] *= 12.0f;
  return v;
}

class GgmlDequantTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GgmlDequantTest, BitExactAgainstGgml) {
  const GgmlType type = GetParam();
  absl::StatusOr<GgmlTypeInfo> info = GgmlTypeOf(static_cast<uint32_t>(type));
  ASSERT_TRUE(info.ok()) << info.status();
  const int64_t n = 256 * 12;  // whole blocks of every type
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<float> w = Weights(n, seed);
    absl::StatusOr<std::string> blocks =
        ::ragkv::testing::GgmlQuantizeRef(static_cast<int>(type), w.data(), n);
    ASSERT_TRUE(blocks.ok()) << blocks.status();
    absl::StatusOr<uint64_t> bytes = GgmlRowBytes(*info, n);
    ASSERT_TRUE(bytes.ok());
    ASSERT_EQ(*bytes, blocks->size()) << info->name << ": block size disagrees with ggml's";
    absl::StatusOr<std::vector<float>> want =
        ::ragkv::testing::GgmlDequantize(static_cast<int>(type), blocks->data(), n);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<float> got(n, -1.0f);
    ASSERT_TRUE(DequantizeGgml(type, blocks->data(), got.data(), n).ok());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &(*want)[i], 4), 0)
          << info->name << " element " << i << ": " << got[i] << " vs ggml " << (*want)[i];
    }
    // And the encoding is the one meant: close to the source weights.
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (got[i] - w[i]) * double(got[i] - w[i]);
      norm += double(w[i]) * w[i];
    }
    EXPECT_LT(std::sqrt(err / norm), info->quantized ? 0.2 : 1e-2) << info->name;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlDequantTest,
                         ::testing::Values(GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0,
                                           GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                           GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                           GgmlType::kQ6_K),
                         [](const auto& p) {
                           return std::string(GgmlTypeOf(static_cast<uint32_t>(p.param))->name);
                         });

TEST(GgmlTypeTest, UnknownAndUnsupportedTypesAreNamed) {
  absl::StatusOr<GgmlTypeInfo> iq = GgmlTypeOf(16);
  ASSERT_FALSE(iq.ok());
  EXPECT_EQ(iq.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(iq.status().message().find("iq2_xxs"), std::string::npos);
  EXPECT_FALSE(GgmlTypeOf(999).ok());
  absl::StatusOr<GgmlTypeInfo> q4k = GgmlTypeOf(12);
  ASSERT_TRUE(q4k.ok());
  EXPECT_FALSE(GgmlRowBytes(*q4k, 100).ok());  // not whole 256-blocks
  EXPECT_EQ(*GgmlRowBytes(*q4k, 512), 2u * 144u);
  std::vector<float> out(100);
  EXPECT_FALSE(DequantizeGgml(GgmlType::kQ8_0, out.data(), out.data(), 33).ok());
}

}  // namespace
}  // namespace ragkv::kernels
