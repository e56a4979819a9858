// The int4 grouped codec (kernels/quant.h) against a naive loop over the
// stated rules: group parameters, codes, the error bound, strided decoding.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/convert.h"
#include "kernels/cpu.h"
#include "kernels/quant.h"
#include "kernels/tensor.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::RandomVec;



struct Coded {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> params;
};

Coded Quantize(const std::vector<float>& x, int64_t H, int64_t T, int64_t D, Int4Axis axis) {
  Coded c;
  c.codes.assign(static_cast<size_t>((H * T * D + 1) / 2), 0xAB);
  c.params.assign(static_cast<size_t>(2 * Int4ParamCount(H, T, D, axis)), 0);
  const absl::Status s = QuantizeInt4Grouped(
      TensorView::Contiguous(const_cast<float*>(x.data()), DType::kF32, {H, T, D}), axis,
      c.codes.data(), c.params.data());
  EXPECT_TRUE(s.ok()) << s;
  return c;
}

// Members: the flat indices of group p's elements, in the documented order.
std::vector<int64_t> Members(int64_t p, int64_t H, int64_t T, int64_t D, Int4Axis axis) {
  std::vector<int64_t> out;
  if (axis == Int4Axis::kRows) {
    const int64_t tg = (T + 31) / 32, d = p % D, g = (p / D) % tg, h = p / D / tg;
    for (int64_t t = g * 32; t < std::min(T, g * 32 + 32); ++t) out.push_back((h * T + t) * D + d);
  } else {
    const int64_t cg = (D + 31) / 32, g = p % cg, ht = p / cg;
    for (int64_t d = g * 32; d < std::min(D, g * 32 + 32); ++d) out.push_back(ht * D + d);
  }
  return out;
}

int Nibble(const std::vector<uint8_t>& codes, int64_t e) {
  return (e & 1) ? codes[e >> 1] >> 4 : codes[e >> 1] & 0xF;
}

// NextHalfUp: the f16 value just above h (finite, not the largest).
float NextHalfUp(uint16_t h) {
  if (h == 0x8000 || h == 0x0000) return HalfToFloat(0x0001);
  return HalfToFloat((h & 0x8000) ? h - 1 : h + 1);
}
float NextHalfDown(uint16_t h) {
  if (h == 0x0000 || h == 0x8000) return HalfToFloat(0x8001);
  return HalfToFloat((h & 0x8000) ? h + 1 : h - 1);
}

// ExpectRules: every group's lo is the largest f16 <= its minimum, step the
// smallest f16 >= (max - lo) / 15 (0 when max == lo), every code is the
// naive clamp(round((x - lo) / step)), and the decode is within step / 2.
void ExpectRules(const std::vector<float>& x, const Coded& c, int64_t H, int64_t T, int64_t D,
                 Int4Axis axis) {
  const int64_t groups = Int4ParamCount(H, T, D, axis);
  for (int64_t p = 0; p < groups; ++p) {
    const std::vector<int64_t> m = Members(p, H, T, D, axis);
    float mn = x[m[0]], mx = x[m[0]];
    for (int64_t e : m) mn = std::min(mn, x[e]), mx = std::max(mx, x[e]);
    const uint16_t step_h = c.params[2 * p], lo_h = c.params[2 * p + 1];
    const float lo = HalfToFloat(lo_h), step = HalfToFloat(step_h);
    ASSERT_LE(lo, mn) << p;
    ASSERT_GT(NextHalfUp(lo_h), mn) << p;
    if (mx == lo) {
      ASSERT_EQ(step, 0.0f) << p;
    } else {
      ASSERT_GE(step, (mx - lo) / 15.0f) << p;
      ASSERT_LT(NextHalfDown(step_h), (mx - lo) / 15.0f) << p;
    }
    for (int64_t e : m) {
      const float want = step > 0 ? std::clamp(std::nearbyint((x[e] - lo) / step), 0.0f, 15.0f) : 0;
      ASSERT_EQ(Nibble(c.codes, e), static_cast<int>(want)) << "group " << p << " element " << e;
      const float back = lo + step * want;
      ASSERT_LE(std::fabs(back - x[e]), step / 2 * (1 + 1e-5f) + 1e-6f * std::fabs(x[e])) << e;
    }
  }
}

TEST(QuantInt4Test, GroupsFollowTheStatedRulesOnBothAxes) {
  // T = 70: token groups of 32, 32, 6; D = 40: channel groups of 32 and 8;
  // an odd element count (3 * 70 * 40 is even, so also 3 x 7 x 5).
  for (auto [H, T, D] : {std::array<int64_t, 3>{3, 70, 40}, {3, 7, 5}, {1, 1, 1}}) {
    auto x = RandomVec(static_cast<int>(H * T * D), 31, -4, 4);
    x[0] = 60000.0f;                            // near the f16 limit
    if (x.size() > 8) x[7] = -1e-6f, x[8] = 3e-7f;  // f16 subnormals
    for (Int4Axis axis : {Int4Axis::kRows, Int4Axis::kChannels}) {
      const Coded c = Quantize(x, H, T, D, axis);
      ExpectRules(x, c, H, T, D, axis);
      if ((H * T * D) & 1) {
        EXPECT_EQ(c.codes.back() >> 4, 0) << "unused high nibble";
      }
    }
  }
}

TEST(QuantInt4Test, ConstantAndNegativeGroupsAreExactOrBounded) {
  std::vector<float> x(2 * 32 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i < 128 ? 0.375f : -2.0f - 0.01f * (i % 7);
  const Coded c = Quantize(x, 2, 32, 4, Int4Axis::kRows);
  ExpectRules(x, c, 2, 32, 4, Int4Axis::kRows);
  std::vector<float> back(x.size());
  ASSERT_TRUE(DequantizeInt4Grouped(c.codes.data(), c.params.data(), Int4Axis::kRows,
                                    TensorView::Contiguous(back.data(), DType::kF32, {2, 32, 4}))
                  .ok());
  for (size_t i = 0; i < 128; ++i) EXPECT_EQ(back[i], 0.375f) << i;  // f16-exact constant
}

TEST(QuantInt4Test, DecodesIntoStridedRowsAndLeavesTheGaps) {
  const int64_t H = 2, T = 45, row_stride = 48, head_stride = 60 * 48;
  for (int64_t D : {36, 5}) {  // D odd: rows start at odd nibbles
  auto x = RandomVec(static_cast<int>(H * T * D), 37, -2, 2);
  for (Int4Axis axis : {Int4Axis::kRows, Int4Axis::kChannels}) {
    const Coded c = Quantize(x, H, T, D, axis);
    std::vector<float> dense(x.size()), out(static_cast<size_t>(H * head_stride), -7.0f);
    ASSERT_TRUE(DequantizeInt4Grouped(c.codes.data(), c.params.data(), axis,
                                      TensorView::Contiguous(dense.data(), DType::kF32, {H, T, D}))
                    .ok());
    TensorView ov = TensorView::Contiguous(out.data(), DType::kF32, {H, T, D});
    ov.stride[0] = head_stride, ov.stride[1] = row_stride;
    ASSERT_TRUE(DequantizeInt4Grouped(c.codes.data(), c.params.data(), axis, ov).ok());
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < row_stride; ++d) {
          const float got = out[h * head_stride + t * row_stride + d];
          ASSERT_EQ(got, d < D ? dense[(h * T + t) * D + d] : -7.0f) << h << " " << t << " " << d;
        }
      }
    }
    // The dense decode is the codec's value lo + q * step of every element.
    for (int64_t p = 0; p < Int4ParamCount(H, T, D, axis); ++p) {
      const float step = HalfToFloat(c.params[2 * p]), lo = HalfToFloat(c.params[2 * p + 1]);
      for (int64_t e : Members(p, H, T, D, axis)) {
        // (equal up to f32 rounding: a SIMD decoder may fuse the multiply-add)
        ASSERT_NEAR(dense[e], lo + step * static_cast<float>(Nibble(c.codes, e)),
                    1e-6f * (std::fabs(lo) + 15 * step))
            << D << " " << e;
      }
    }
  }
  }
}

// Large tensors quantize and decode on several threads; the bytes must equal
// the single-threaded ones (same code path, one writer per byte).
TEST(QuantInt4Test, ThreadedEqualsSingleThreaded) {
  const int64_t H = 4, T = 300, D = 64;
  auto x = RandomVec(static_cast<int>(H * T * D), 41, -3, 3);
  const int saved = MaxThreads();
  for (Int4Axis axis : {Int4Axis::kRows, Int4Axis::kChannels}) {
    SetMaxThreads(1);
    const Coded one = Quantize(x, H, T, D, axis);
    SetMaxThreads(3);
    const Coded many = Quantize(x, H, T, D, axis);
    EXPECT_EQ(one.codes, many.codes);
    EXPECT_EQ(one.params, many.params);
    std::vector<float> a(x.size()), b(x.size());
    SetMaxThreads(1);
    ASSERT_TRUE(DequantizeInt4Grouped(one.codes.data(), one.params.data(), axis,
                                      TensorView::Contiguous(a.data(), DType::kF32, {H, T, D}))
                    .ok());
    SetMaxThreads(3);
    ASSERT_TRUE(DequantizeInt4Grouped(one.codes.data(), one.params.data(), axis,
                                      TensorView::Contiguous(b.data(), DType::kF32, {H, T, D}))
                    .ok());
    EXPECT_EQ(a, b);
  }
  SetMaxThreads(saved);
}

TEST(QuantInt4Test, RefusesWhatItCannotRepresent) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -70000.0f}) {
    std::vector<float> x = {1.0f, bad, 2.0f, 3.0f};
    std::vector<uint8_t> codes(2);
    std::vector<uint16_t> params(2 * 4);
    const absl::Status s = QuantizeInt4Grouped(
        TensorView::Contiguous(x.data(), DType::kF32, {1, 4, 1}), Int4Axis::kChannels,
        codes.data(), params.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("group 1"), std::string::npos) << s;
  }
  std::vector<float> x(8, 1.0f);
  EXPECT_EQ(QuantizeInt4Grouped(TensorView::Contiguous(x.data(), DType::kF32, {1, 2, 4}),
                                Int4Axis::kRows, nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ragkv::kernels
