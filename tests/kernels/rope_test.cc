// RoPE vs a naive double reference; re-rotation composes exactly with
// ApplyRope; half-precision re-rotation matches f32 re-rotation rounded once.
// Tolerances: f32 2e-6 * (1 + |x|) for positions < 10^4; p + delta composition
// 1e-5 (angles are rounded through f32 cos/sin tables at both steps).
#include "kernels/rope.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/convert.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::IsaScope;
using testing::Isas;
using testing::RandomVec;

// Reference rotation of one vector at position pos.
void RefRotate(float* x, double pos, int hd, double theta, RopeLayout layout) {
  const int half = hd / 2;
  std::vector<double> y(x, x + hd);
  for (int j = 0; j < half; ++j) {
    const double a = pos * std::pow(theta, -2.0 * j / hd);
    const int i0 = layout == RopeLayout::kInterleaved ? 2 * j : j;
    const int i1 = layout == RopeLayout::kInterleaved ? 2 * j + 1 : j + half;
    const double u = y[i0], v = y[i1];
    x[i0] = static_cast<float>(u * std::cos(a) - v * std::sin(a));
    x[i1] = static_cast<float>(u * std::sin(a) + v * std::cos(a));
  }
}

TEST(RopeTest, ApplyMatchesReferenceBothLayouts) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
      for (int hd : {2, 8, 64, 128, 96, 34}) {
        const int tokens = 29, heads = 3;
        RopeParams p;
        p.head_dim = hd;
        p.layout = layout;
        p.theta = hd == 96 ? 500000.0f : 10000.0f;
        auto x = RandomVec(static_cast<size_t>(tokens) * heads * hd, hd);
        std::vector<int32_t> pos(tokens);
        for (int t = 0; t < tokens; ++t) pos[t] = (t * 347) % 5000;
        auto want = x;
        for (int t = 0; t < tokens; ++t)
          for (int h = 0; h < heads; ++h)
            RefRotate(&want[(t * heads + h) * hd], pos[t], hd, p.theta, layout);
        ASSERT_TRUE(
            ApplyRope(TensorView::Contiguous(x.data(), DType::kF32, {tokens, heads, hd}), pos.data(), p)
                .ok());
        for (size_t i = 0; i < x.size(); ++i)
          ASSERT_NEAR(x[i], want[i], 2e-6 * (1 + std::abs(want[i])))
              << IsaName(isa) << " hd=" << hd << " layout=" << static_cast<int>(layout) << " i=" << i;
      }
    }
  }
}

TEST(RopeTest, ConsecutivePositionsRecurrence) {
  // Prefill-style positions (runs of consecutive values, duplicates, jumps)
  // exercise the angle-addition recurrence of ApplyRope's tables.
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
    const int tokens = 3000, heads = 2, hd = 128;
    RopeParams p;
    p.head_dim = hd;
    p.layout = layout;
    std::vector<int32_t> pos(tokens);
    for (int t = 0; t < tokens; ++t) pos[t] = t < 1000 ? 20000 + t : (t < 1010 ? 7 : t);
    auto x = RandomVec(static_cast<size_t>(tokens) * heads * hd, 77);
    auto want = x;
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads; ++h) RefRotate(&want[(t * heads + h) * hd], pos[t], hd, 1e4, layout);
    ASSERT_TRUE(
        ApplyRope(TensorView::Contiguous(x.data(), DType::kF32, {tokens, heads, hd}), pos.data(), p).ok());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(x[i], want[i], 2e-6 * (1 + std::abs(want[i]))) << i;
  }
}

TEST(RopeTest, CacheLayoutStrides) {
  // The cache layout [heads][tokens][hd] seen as [tokens, heads, hd] strides.
  const int heads = 4, tokens = 10, hd = 16;
  RopeParams p;
  p.head_dim = hd;
  auto k = RandomVec(heads * tokens * hd, 5);
  auto want = k;
  std::vector<int32_t> pos(tokens);
  for (int t = 0; t < tokens; ++t) pos[t] = 100 + t;
  for (int h = 0; h < heads; ++h)
    for (int t = 0; t < tokens; ++t) RefRotate(&want[(h * tokens + t) * hd], pos[t], hd, 1e4, p.layout);
  TensorView v = TensorView::Strided(k.data(), DType::kF32, {tokens, heads, hd},
                                     {hd, tokens * hd, 1});
  ASSERT_TRUE(ApplyRope(v, pos.data(), p).ok());
  for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k[i], want[i], 2e-6 * (1 + std::abs(want[i])));
}

TEST(RopeTest, RerotateByDeltaEqualsRopeAtShiftedPosition) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
      for (int64_t delta : {int64_t{1}, int64_t{37}, int64_t{1000}, int64_t{-5}, int64_t{3071}}) {
        const int heads = 2, tokens = 50, hd = 64;
        RopeParams p;
        p.head_dim = hd;
        p.layout = layout;
        auto raw = RandomVec(heads * tokens * hd, 9);
        // Cache layout, cached at chunk-local positions 0..T-1.
        TensorView kv = TensorView::Contiguous(nullptr, DType::kF32, {heads, tokens, hd});
        auto as_tokens = [&](float* data) {
          return TensorView::Strided(data, DType::kF32, {tokens, heads, hd}, {hd, tokens * hd, 1});
        };
        std::vector<int32_t> local(tokens), global(tokens);
        for (int t = 0; t < tokens; ++t) {
          local[t] = t;
          global[t] = static_cast<int32_t>(t + delta);
        }
        if (delta < 0) {  // start the chunk at -delta so positions stay >= 0
          for (int t = 0; t < tokens; ++t) {
            local[t] = static_cast<int32_t>(t - delta);
            global[t] = t;
          }
        }
        auto cached = raw, direct = raw;
        ASSERT_TRUE(ApplyRope(as_tokens(cached.data()), local.data(), p).ok());
        kv.data = cached.data();
        ASSERT_TRUE(RerotateKeys(kv, delta, p).ok());
        ASSERT_TRUE(ApplyRope(as_tokens(direct.data()), global.data(), p).ok());
        for (size_t i = 0; i < raw.size(); ++i)
          ASSERT_NEAR(cached[i], direct[i], 1e-5) << IsaName(isa) << " delta=" << delta;
        // Rotating back by -delta restores the cached keys.
        auto back = cached;
        kv.data = back.data();
        ASSERT_TRUE(RerotateKeys(kv, -delta, p).ok());
        auto orig = raw;
        ASSERT_TRUE(ApplyRope(as_tokens(orig.data()), local.data(), p).ok());
        for (size_t i = 0; i < raw.size(); ++i) ASSERT_NEAR(back[i], orig[i], 1e-5);
      }
    }
  }
}

// YaRN's shape of RoPE: per-pair divisors and a magnitude. ApplyRope
// scales by mscale (naive reference: divisors, then cos/sin times mscale);
// RerotateKeys is a pure rotation, so a key cached at p and moved by d
// equals the key roped at p + d, both carrying mscale once.
TEST(RopeTest, MscaleScalesApplyOnlyAndRerotationComposes) {
  const int hd = 32, heads = 2, tokens = 20;
  std::vector<float> ff(hd / 2);
  for (int j = 0; j < hd / 2; ++j) ff[j] = j < 5 ? 1.0f : (j < 11 ? 1.0f + 0.5f * (j - 4) : 4.0f);
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
      RopeParams p;
      p.head_dim = hd;
      p.layout = layout;
      p.freq_factors = ff.data();
      p.mscale = 1.1386f;
      auto x = RandomVec(static_cast<size_t>(tokens) * heads * hd, 21);
      std::vector<int32_t> pos(tokens), moved(tokens);
      for (int t = 0; t < tokens; ++t) pos[t] = 3 * t, moved[t] = 3 * t + 777;
      auto want = x, direct = x, got = x;
      for (int t = 0; t < tokens; ++t) {
        for (int h = 0; h < heads; ++h) {
          float* v = &want[(t * heads + h) * hd];
          std::vector<double> y(v, v + hd);
          for (int j = 0; j < hd / 2; ++j) {
            const double a = pos[t] * std::pow(10000.0, -2.0 * j / hd) / ff[j];
            const int i0 = layout == RopeLayout::kInterleaved ? 2 * j : j;
            const int i1 = layout == RopeLayout::kInterleaved ? 2 * j + 1 : j + hd / 2;
            v[i0] = static_cast<float>(p.mscale * (y[i0] * std::cos(a) - y[i1] * std::sin(a)));
            v[i1] = static_cast<float>(p.mscale * (y[i0] * std::sin(a) + y[i1] * std::cos(a)));
          }
        }
      }
      auto view = [&](float* d) { return TensorView::Contiguous(d, DType::kF32, {tokens, heads, hd}); };
      ASSERT_TRUE(ApplyRope(view(got.data()), pos.data(), p).ok());
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], want[i], 3e-6 * (1 + std::abs(want[i])));
      // Cache layout view of the token-major buffer, then move by 777.
      TensorView kv = TensorView::Strided(got.data(), DType::kF32, {heads, tokens, hd},
                                          {hd, heads * hd, 1});
      ASSERT_TRUE(RerotateKeys(kv, 777, p).ok());
      ASSERT_TRUE(ApplyRope(view(direct.data()), moved.data(), p).ok());
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], direct[i], 1e-5) << IsaName(isa);
    }
  }
  RopeParams bad;
  bad.head_dim = hd;
  bad.mscale = 0;
  std::vector<float> one(hd);
  int32_t p0 = 0;
  EXPECT_FALSE(ApplyRope(TensorView::Contiguous(one.data(), DType::kF32, {1, 1, hd}), &p0, bad).ok());
}

TEST(RopeTest, RerotateHalfTypesMatchF32RoundedOnce) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (DType dt : {DType::kF16, DType::kBF16}) {
      for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
        const int heads = 3, tokens = 300, hd = 128;  // > one token block
        const size_t n = static_cast<size_t>(heads) * tokens * hd;
        RopeParams p;
        p.head_dim = hd;
        p.layout = layout;
        auto f = RandomVec(n, 11, -4, 4);
        std::vector<uint16_t> h(n);
        ASSERT_TRUE(Convert(TensorView::Contiguous(f.data(), DType::kF32, {heads, tokens, hd}),
                            TensorView::Contiguous(h.data(), dt, {heads, tokens, hd}))
                        .ok());
        std::vector<float> hf(n);
        for (size_t i = 0; i < n; ++i)
          hf[i] = dt == DType::kF16 ? HalfToFloat(h[i]) : Bf16ToFloat(h[i]);
        ASSERT_TRUE(RerotateKeys(TensorView::Contiguous(hf.data(), DType::kF32, {heads, tokens, hd}),
                                 777, p)
                        .ok());
        ASSERT_TRUE(RerotateKeys(TensorView::Contiguous(h.data(), dt, {heads, tokens, hd}), 777, p).ok());
        for (size_t i = 0; i < n; ++i) {
          const uint16_t want = dt == DType::kF16 ? FloatToHalf(hf[i]) : FloatToBf16(hf[i]);
          // Same f32 rotation (up to FMA contraction), one rounding: at most
          // one unit in the last place apart.
          ASSERT_LE(std::abs(static_cast<int>(h[i]) - static_cast<int>(want)), 1)
              << IsaName(isa) << " " << DTypeName(dt) << " i=" << i;
        }
      }
    }
  }
}

TEST(RopeTest, BadInputs) {
  std::vector<float> x(64);
  std::vector<int32_t> pos(4, 0);
  RopeParams p;
  p.head_dim = 7;
  EXPECT_FALSE(ApplyRope(TensorView::Contiguous(x.data(), DType::kF32, {4, 2, 7}), pos.data(), p).ok());
  p.head_dim = 8;
  EXPECT_FALSE(ApplyRope(TensorView::Contiguous(x.data(), DType::kF32, {4, 1, 16}), pos.data(), p).ok());
  EXPECT_FALSE(ApplyRope(TensorView::Contiguous(x.data(), DType::kF32, {4, 2, 8}), nullptr, p).ok());
  EXPECT_FALSE(ApplyRope(TensorView::Contiguous(nullptr, DType::kF32, {4, 2, 8}), pos.data(), p).ok());
  EXPECT_FALSE(ApplyRope(TensorView::Contiguous(x.data(), DType::kF16, {4, 2, 8}), pos.data(), p).ok());
  EXPECT_FALSE(RerotateKeys(TensorView::Contiguous(x.data(), DType::kI8, {2, 4, 8}), 3, p).ok());
  EXPECT_FALSE(RerotateKeys(TensorView::Contiguous(x.data(), DType::kF32, {8, 8}), 3, p).ok());
  p.head_dim = 0;
  EXPECT_FALSE(RerotateKeys(TensorView::Contiguous(x.data(), DType::kF32, {2, 4, 0}), 3, p).ok());
  p.head_dim = 8;
  p.theta = 0.0f;
  EXPECT_FALSE(RerotateKeys(TensorView::Contiguous(x.data(), DType::kF32, {2, 4, 8}), 3, p).ok());
}

}  // namespace
}  // namespace ragkv::kernels
