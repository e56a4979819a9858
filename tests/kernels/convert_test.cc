// fp16 / bf16 conversions: scalar helpers against independent references,
// bulk Convert on every ISA against the scalar helpers (bit exact).
#include "kernels/convert.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::IsaScope;
using testing::Isas;

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Reference half -> double from the bit fields.
double HalfRef(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double sign = s ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(1024 + m, e - 25);
}

TEST(ConvertTest, HalfToFloatExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = HalfRef(static_cast<uint16_t>(h));
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << h;
    }
  }
}

TEST(ConvertTest, FloatToHalfRoundTripAndRounding) {
  // Every finite half round-trips exactly.
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 31) == 31) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  // Nearest-even against a reference search over the two neighbours.
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 200000; ++i) {
    float f = FromBits(bits(rng));
    if (i % 3 == 0) f = std::ldexp(static_cast<float>(bits(rng) % 4096) / 4096.0f, -14 - i % 12);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    const uint16_t got = FloatToHalf(f);
    const double x = f;
    const double gv = HalfRef(got);
    if (std::abs(x) >= 65520.0) {
      ASSERT_TRUE(std::isinf(gv) && (gv > 0) == (x > 0)) << f;
      continue;
    }
    // The neighbour on the other side must not be strictly closer, and on a
    // tie the result is even.
    const uint16_t up = static_cast<uint16_t>(got + 1), down = static_cast<uint16_t>(got - 1);
    for (uint16_t nb : {up, down}) {
      if ((nb & 0x7fff) >= 0x7c00 || ((nb ^ got) & 0x8000)) continue;
      const double nv = HalfRef(nb);
      const double dg = std::abs(gv - x), dn = std::abs(nv - x);
      ASSERT_LE(dg, dn) << f;
      if (dg == dn) {
        ASSERT_EQ(got & 1, 0) << f;
      }
    }
  }
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(ConvertTest, Bf16) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 200000; ++i) {
    const float f = FromBits(bits(rng));
    const uint16_t got = FloatToBf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(got)));
      continue;
    }
    // Reference: truncation candidates lo/hi, nearest, ties to even.
    const uint32_t b = Bits(f);
    const uint16_t lo = static_cast<uint16_t>(b >> 16);
    const uint32_t rem = b & 0xffff;
    uint16_t want = lo;
    if (rem > 0x8000 || (rem == 0x8000 && (lo & 1))) want = static_cast<uint16_t>(lo + 1);
    ASSERT_EQ(got, want) << f;
    ASSERT_EQ(Bits(Bf16ToFloat(got)), static_cast<uint32_t>(got) << 16);
  }
}

TEST(ConvertTest, BulkMatchesScalarOnEveryIsa) {
  const int64_t n = 100003;  // odd, above the parallel threshold
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> f32(n);
  for (int64_t i = 0; i < n; ++i) f32[i] = i % 7 == 0 ? FromBits(bits(rng)) : normal(rng);
  std::vector<uint16_t> h_ref(n), b_ref(n);
  for (int64_t i = 0; i < n; ++i) {
    h_ref[i] = FloatToHalf(f32[i]);
    b_ref[i] = FloatToBf16(f32[i]);
  }
  auto same_f = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : Bits(a) == Bits(b); };
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(IsaName(isa));
    std::vector<uint16_t> h(n), b(n), hb(n);
    std::vector<float> back(n);
    ASSERT_TRUE(Convert(TensorView::Contiguous(f32.data(), DType::kF32, {n}),
                        TensorView::Contiguous(h.data(), DType::kF16, {n}))
                    .ok());
    ASSERT_TRUE(Convert(TensorView::Contiguous(f32.data(), DType::kF32, {n}),
                        TensorView::Contiguous(b.data(), DType::kBF16, {n}))
                    .ok());
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(f32[i])) {
        ASSERT_TRUE(std::isnan(HalfToFloat(h[i])));
        ASSERT_TRUE(std::isnan(Bf16ToFloat(b[i])));
      } else {
        ASSERT_EQ(h[i], h_ref[i]) << i << " " << f32[i];
        ASSERT_EQ(b[i], b_ref[i]) << i;
      }
    }
    ASSERT_TRUE(Convert(TensorView::Contiguous(h.data(), DType::kF16, {n}),
                        TensorView::Contiguous(back.data(), DType::kF32, {n}))
                    .ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_f(back[i], HalfToFloat(h[i]))) << i;
    ASSERT_TRUE(Convert(TensorView::Contiguous(b.data(), DType::kBF16, {n}),
                        TensorView::Contiguous(back.data(), DType::kF32, {n}))
                    .ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_f(back[i], Bf16ToFloat(b[i]))) << i;
    // f16 -> bf16 goes through f32 exactly.
    ASSERT_TRUE(Convert(TensorView::Contiguous(h.data(), DType::kF16, {n}),
                        TensorView::Contiguous(hb.data(), DType::kBF16, {n}))
                    .ok());
    for (int64_t i = 0; i < n; ++i) {
      const float want = Bf16ToFloat(FloatToBf16(HalfToFloat(h[i])));
      ASSERT_TRUE(same_f(Bf16ToFloat(hb[i]), want)) << i;
    }
  }
}

TEST(ConvertTest, BadInputs) {
  std::vector<float> a(10);
  std::vector<uint16_t> b(12);
  EXPECT_FALSE(Convert(TensorView::Contiguous(a.data(), DType::kF32, {10}),
                       TensorView::Contiguous(b.data(), DType::kF16, {12}))
                   .ok());
  EXPECT_FALSE(Convert(TensorView::Contiguous(a.data(), DType::kF32, {10}),
                       TensorView::Contiguous(b.data(), DType::kI8, {10}))
                   .ok());
  EXPECT_FALSE(Convert(TensorView::Contiguous(nullptr, DType::kF32, {10}),
                       TensorView::Contiguous(b.data(), DType::kF16, {10}))
                   .ok());
  TensorView strided = TensorView::Contiguous(a.data(), DType::kF32, {5, 1});
  strided.stride[0] = 2;
  EXPECT_FALSE(Convert(strided, TensorView::Contiguous(b.data(), DType::kF16, {5})).ok());
  // Same dtype is a copy; reshapes with equal numel are fine.
  std::vector<float> c(10);
  for (int i = 0; i < 10; ++i) a[i] = static_cast<float>(i);
  EXPECT_TRUE(Convert(TensorView::Contiguous(a.data(), DType::kF32, {10}),
                      TensorView::Contiguous(c.data(), DType::kF32, {2, 5}))
                  .ok());
  EXPECT_EQ(c, a);
}

}  // namespace
}  // namespace ragkv::kernels
