// TensorView, CPU dispatch, KV deviation, top-k and int8 quantization.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu.h"
#include "kernels/deviation.h"
#include "kernels/quant.h"
#include "kernels/tensor.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::IsaScope;
using testing::Isas;
using testing::RandomVec;

TEST(TensorViewTest, Basics) {
  float buf[24];
  auto v = TensorView::Contiguous(buf, DType::kF32, {2, 3, 4});
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.stride[0], 12);
  EXPECT_EQ(v.stride[2], 1);
  EXPECT_TRUE(v.IsContiguous());
  EXPECT_EQ(v.DebugString(), "f32[2,3,4]");
  v.stride[0] = 13;
  EXPECT_FALSE(v.IsContiguous());
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_STREQ(DTypeName(DType::kI8), "i8");
  // Strided: the given strides; the contiguous ones give a contiguous view.
  auto s = TensorView::Strided(buf, DType::kF32, {3, 2, 4}, {4, 12, 1});
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.shape[1], 2);
  EXPECT_EQ(s.stride[1], 12);
  EXPECT_FALSE(s.IsContiguous());
  EXPECT_TRUE(TensorView::Strided(buf, DType::kF32, {2, 3, 4}, {12, 4, 1}).IsContiguous());
  EXPECT_EQ(TensorView::Strided(buf, DType::kF32, {2, 3}, {3}).rank, 0);  // count mismatch
}

TEST(CpuTest, DispatchAndThreads) {
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(DetectedIsa()));
  {
    IsaScope s(Isa::kScalar);
    EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  }
  EXPECT_EQ(static_cast<int>(ActiveIsa()),
            std::min(static_cast<int>(DetectedIsa()), static_cast<int>(IsaCap())));
  EXPECT_STREQ(IsaName(Isa::kAvx2), "avx2");
  const int before = MaxThreads();
  EXPECT_GE(before, 1);
  SetMaxThreads(0);
  EXPECT_EQ(MaxThreads(), 1);
  SetMaxThreads(before);
  EXPECT_EQ(MaxThreads(), before);
}

// RAGKV_ISA (CI's avx2 stage) caps dispatch for the whole process.
TEST(CpuTest, EnvironmentCapsDispatch) {
  const char* env = std::getenv("RAGKV_ISA");
  RecordProperty("active_isa", IsaName(ActiveIsa()));
  if (env == nullptr || *env == '\0') {
    EXPECT_EQ(IsaCap(), Isa::kAvx512);
    GTEST_SKIP() << "RAGKV_ISA not set; dispatching to " << IsaName(ActiveIsa());
  }
  const std::string want = env;
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(IsaCap()));
  if (want == "avx2") {
    EXPECT_EQ(IsaCap(), Isa::kAvx2);
  }
  if (want == "scalar") {
    EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  }
  EXPECT_LE(static_cast<int>(Isas().back()), static_cast<int>(IsaCap()));
}

TEST(DeviationTest, MatchesNaiveAndAccumulates) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (int hd : {1, 8, 64, 67, 128}) {
      const int heads = 4, tokens = 301;
      auto a = RandomVec(heads * tokens * hd, hd);
      auto b = RandomVec(heads * tokens * hd, hd + 100);
      std::vector<float> out(tokens, 5.0f);
      auto va = TensorView::Contiguous(a.data(), DType::kF32, {heads, tokens, hd});
      auto vb = TensorView::Contiguous(b.data(), DType::kF32, {heads, tokens, hd});
      ASSERT_TRUE(KvDeviation(va, vb, out.data()).ok());
      std::vector<double> want(tokens, 0.0);
      for (int h = 0; h < heads; ++h)
        for (int t = 0; t < tokens; ++t)
          for (int d = 0; d < hd; ++d) {
            const double x = a[(h * tokens + t) * hd + d] - b[(h * tokens + t) * hd + d];
            want[t] += x * x;
          }
      for (int t = 0; t < tokens; ++t) ASSERT_NEAR(out[t], want[t], 1e-5 * (1 + want[t]));
      ASSERT_TRUE(KvDeviation(va, vb, out.data(), /*accumulate=*/true).ok());
      for (int t = 0; t < tokens; ++t) ASSERT_NEAR(out[t], 2 * want[t], 2e-5 * (1 + want[t]));
    }
  }
  std::vector<float> a(16), out(2);
  EXPECT_FALSE(KvDeviation(TensorView::Contiguous(a.data(), DType::kF32, {2, 2, 4}),
                           TensorView::Contiguous(a.data(), DType::kF32, {2, 4, 2}), out.data())
                   .ok());
  EXPECT_FALSE(KvDeviation(TensorView::Contiguous(a.data(), DType::kF32, {2, 2, 4}),
                           TensorView::Contiguous(a.data(), DType::kF32, {2, 2, 4}), nullptr)
                   .ok());
}

TEST(TopKTest, MatchesFullSortWithTiesAndNaN) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 500);
    std::vector<float> s(n);
    for (auto& x : s) x = static_cast<float>(rng() % 20);  // many ties
    for (int i = 0; i < n / 10; ++i) s[rng() % n] = std::numeric_limits<float>::quiet_NaN();
    if (n > 3) s[1] = INFINITY, s[2] = -INFINITY;
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
      const bool na = std::isnan(s[a]), nb = std::isnan(s[b]);
      if (na != nb) return nb;
      if (na) return false;
      return s[a] > s[b];
    });
    for (int k : {0, 1, n / 3, n}) {
      std::vector<int32_t> got(k);
      ASSERT_TRUE(TopK(s.data(), n, k, got.data()).ok());
      for (int i = 0; i < k; ++i) ASSERT_EQ(got[i], idx[i]) << "n=" << n << " k=" << k << " i=" << i;
    }
  }
  float s[3] = {1, 2, 3};
  int32_t o[4];
  EXPECT_FALSE(TopK(s, 3, 4, o).ok());
  EXPECT_FALSE(TopK(s, 3, -1, o).ok());
  EXPECT_FALSE(TopK(nullptr, 3, 1, o).ok());
}

TEST(QuantTest, RoundTripWithinHalfScale) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    const int groups = 3, rows = 257, ch = 65;
    auto x = RandomVec(groups * rows * ch, 17, -5, 5);
    for (int r = 0; r < rows; ++r) x[(1 * rows + r) * ch + 7] = 0.0f;  // all-zero column
    x[(2 * rows + 3) * ch + 9] = 1000.0f;                               // outlier column
    std::vector<int8_t> q(x.size());
    std::vector<float> scales(groups * ch), back(x.size());
    auto xv = TensorView::Contiguous(x.data(), DType::kF32, {groups, rows, ch});
    ASSERT_TRUE(QuantizeInt8PerChannel(xv, q.data(), scales.data()).ok());
    EXPECT_EQ(scales[1 * ch + 7], 1.0f);
    for (int g = 0; g < groups; ++g)
      for (int c = 0; c < ch; ++c) {
        float mx = 0;
        for (int r = 0; r < rows; ++r) mx = std::max(mx, std::abs(x[(g * rows + r) * ch + c]));
        if (mx > 0) {
          ASSERT_FLOAT_EQ(scales[g * ch + c], mx / 127.0f);
        }
      }
    ASSERT_TRUE(DequantizeInt8PerChannel(
                    q.data(), scales.data(),
                    TensorView::Contiguous(back.data(), DType::kF32, {groups, rows, ch}))
                    .ok());
    for (int g = 0; g < groups; ++g)
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < ch; ++c) {
          const size_t i = (static_cast<size_t>(g) * rows + r) * ch + c;
          const float sc = scales[g * ch + c];
          ASSERT_GE(q[i], -127);
          ASSERT_LE(std::abs(back[i] - x[i]), sc * 0.5f * (1 + 1e-5f)) << i;
          ASSERT_EQ(back[i], q[i] * sc);
        }
  }
  std::vector<float> x(8);
  int8_t q[8];
  float sc[4];
  EXPECT_FALSE(QuantizeInt8PerChannel(TensorView::Contiguous(x.data(), DType::kF32, {2, 4}), q, sc).ok());
  EXPECT_FALSE(QuantizeInt8PerChannel(TensorView::Contiguous(x.data(), DType::kF32, {1, 2, 4}), q, nullptr).ok());
  EXPECT_FALSE(DequantizeInt8PerChannel(nullptr, sc, TensorView::Contiguous(x.data(), DType::kF32, {1, 2, 4})).ok());
}


// The e4m3 grid written out independently: code c has exponent field c>>3 & 15
// and mantissa c & 7; value (1 + m/8) 2^(e-7), subnormal m 2^-9.
double E4M3Value(int c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const double mag = e == 0 ? m / 512.0 : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return (c & 0x80) ? -mag : mag;
}

// NearestE4M3: the finite code nearest to x (ties to the even mantissa),
// by scanning all of them; saturates at +-448.
int NearestE4M3(float x) {
  int best = -1;
  double best_d = 1e300;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    if (c == 0x80) continue;           // -0: prefer +0 for x == 0... unless negative
    const double d = std::abs(E4M3Value(c) - x);
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_d = d;
    }
  }
  if (E4M3Value(best) == 0.0 && std::signbit(x)) best = 0x80;
  return best;
}

TEST(QuantTest, Fp8E4M3MatchesTheNearestCodeOfTheGrid) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(static_cast<uint8_t>(c))));
      continue;
    }
    ASSERT_EQ(Fp8E4M3ToFloat(static_cast<uint8_t>(c)), static_cast<float>(E4M3Value(c))) << c;
    ASSERT_EQ(FloatToFp8E4M3(static_cast<float>(E4M3Value(c))), c) << c;  // exact values round-trip
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-14, 10);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(rng), ex(rng));
    ASSERT_EQ(FloatToFp8E4M3(x), NearestE4M3(x)) << x;
  }
  // Ties: halfway between 1.0 (m=0) and 1.125 (m=1) goes to the even 1.0;
  // between 1.125 and 1.25 to the even 1.25.
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), FloatToFp8E4M3(1.0f));
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), FloatToFp8E4M3(1.25f));
  EXPECT_EQ(FloatToFp8E4M3(1e6f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(-1e6f), 0xFE);
}

TEST(QuantTest, Fp8PerGroupRoundTripIntoStridedRowsWithinHalfAStep) {
  const int groups = 3, rows = 130, ch = 64, row_stride = 80, group_stride = 200 * 80;
  auto x = RandomVec(groups * rows * ch, 23, -3, 3);
  for (int i = 0; i < rows * ch; ++i) x[rows * ch + i] = 0.0f;  // all-zero group
  x[2 * rows * ch + 5] = -90.0f;                                // outlier
  std::vector<uint8_t> q(x.size());
  std::vector<float> scales(groups);
  auto xv = TensorView::Contiguous(x.data(), DType::kF32, {groups, rows, ch});
  ASSERT_TRUE(QuantizeFp8E4M3PerGroup(xv, q.data(), scales.data()).ok());
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_FLOAT_EQ(scales[2], 90.0f / 448.0f);
  std::vector<float> out(static_cast<size_t>(groups) * group_stride, -7.0f);
  TensorView ov = TensorView::Contiguous(out.data(), DType::kF32, {groups, rows, ch});
  ov.stride[0] = group_stride;
  ov.stride[1] = row_stride;
  ASSERT_TRUE(DequantizeFp8E4M3PerGroup(q.data(), scales.data(), ov).ok());
  for (int g = 0; g < groups; ++g)
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < ch; ++c) {
        const float xi = x[(g * rows + r) * ch + c];
        const float back = out[g * group_stride + r * row_stride + c];
        const float bound = std::max(std::abs(xi) / 16.0f, scales[g] / 1024.0f);
        ASSERT_LE(std::abs(back - xi), bound * (1 + 1e-5f)) << g << " " << r << " " << c;
      }
      ASSERT_EQ(out[g * group_stride + r * row_stride + ch], -7.0f);  // gap untouched
    }
  // A head of tiny values (scale ~1e-41, subnormal): zeros stay zero, the
  // rest within the bound (dividing by the scale; its reciprocal overflows).
  std::vector<float> tiny = {0.0f, 1e-38f, -2e-38f, 0.0f, 5e-39f, 3e-38f};
  std::vector<uint8_t> tq(tiny.size());
  float ts = 0;
  ASSERT_TRUE(QuantizeFp8E4M3PerGroup(TensorView::Contiguous(tiny.data(), DType::kF32, {1, 1, 6}),
                                      tq.data(), &ts)
                  .ok());
  std::vector<float> tb(tiny.size());
  ASSERT_TRUE(DequantizeFp8E4M3PerGroup(tq.data(), &ts,
                                        TensorView::Contiguous(tb.data(), DType::kF32, {1, 1, 6}))
                  .ok());
  for (size_t i = 0; i < tiny.size(); ++i) {
    if (tiny[i] == 0.0f) {
      EXPECT_EQ(tb[i], 0.0f) << i;
    } else {
      EXPECT_LE(std::abs(tb[i] - tiny[i]), std::abs(tiny[i]) / 8) << i;
    }
  }
  std::vector<float> bad = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(QuantizeFp8E4M3PerGroup(TensorView::Contiguous(bad.data(), DType::kF32, {1, 1, 2}),
                                       q.data(), scales.data())
                   .ok());
}

TEST(QuantTest, Int8DequantizesIntoStridedRows) {
  const int groups = 2, rows = 9, ch = 16;
  auto x = RandomVec(groups * rows * ch, 29, -2, 2);
  std::vector<int8_t> q(x.size());
  std::vector<float> scales(groups * ch), dense(x.size()), strided(groups * 12 * 20, 0.0f);
  ASSERT_TRUE(QuantizeInt8PerChannel(TensorView::Contiguous(x.data(), DType::kF32, {groups, rows, ch}),
                                     q.data(), scales.data())
                  .ok());
  ASSERT_TRUE(DequantizeInt8PerChannel(q.data(), scales.data(),
                                       TensorView::Contiguous(dense.data(), DType::kF32, {groups, rows, ch}))
                  .ok());
  TensorView sv = TensorView::Contiguous(strided.data(), DType::kF32, {groups, rows, ch});
  sv.stride[0] = 12 * 20;
  sv.stride[1] = 20;
  ASSERT_TRUE(DequantizeInt8PerChannel(q.data(), scales.data(), sv).ok());
  for (int g = 0; g < groups; ++g)
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < ch; ++c)
        ASSERT_EQ(strided[g * 240 + r * 20 + c], dense[(g * rows + r) * ch + c]);
}

}  // namespace
}  // namespace ragkv::kernels
