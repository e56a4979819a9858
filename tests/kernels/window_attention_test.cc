// Gemma 3's kernels (docs/gemma3.md): SelectiveAttention with a sliding
// window against a naive double-precision masked loop (tolerance as
// attention_test: |out - ref| <= 2e-5 (1 + |ref|)), and GeGluGgml against
// a scalar restatement of ggml's CPU rule (exact: the same f16 table).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/cpu.h"
#include "kernels/elementwise.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::IsaScope;
using testing::Isas;
using testing::RandomVec;

// Reference: row r at pos[r] sees keys max(0, pos - w + 1) .. pos (w = 0:
// from 0), scale 1/sqrt(D), GQA.
std::vector<float> Reference(const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const std::vector<int32_t>& pos,
                             int heads, int kvh, int D, int n, int w) {
  const int g = heads / kvh;
  std::vector<float> out(q.size());
  for (size_t r = 0; r < pos.size(); ++r) {
    const int lo = w > 0 ? std::max(0, pos[r] - w + 1) : 0;
    for (int h = 0; h < heads; ++h) {
      const float* qv = &q[(r * heads + h) * D];
      std::vector<double> s;
      double mx = -INFINITY;
      for (int j = lo; j <= pos[r]; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += double(qv[d]) * k[((size_t(h / g)) * n + j) * D + d];
        s.push_back(dot / std::sqrt(double(D)));
        mx = std::max(mx, s.back());
      }
      double sum = 0;
      std::vector<double> acc(D);
      for (int j = lo; j <= pos[r]; ++j) {
        const double e = std::exp(s[j - lo] - mx);
        sum += e;
        for (int d = 0; d < D; ++d) acc[d] += e * v[((size_t(h / g)) * n + j) * D + d];
      }
      for (int d = 0; d < D; ++d) out[(r * heads + h) * D + d] = float(acc[d] / sum);
    }
  }
  return out;
}

double WorstError(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(want[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

TEST(WindowAttentionTest, MatchesMaskedLoopAcrossIsasWindowsAndRows) {
  const int saved = MaxThreads();
  struct Case {
    int heads, kvh, D, n, w;
    bool scattered;
    int threads;
  };
  const Case cases[] = {
      {4, 2, 64, 200, 16, false, 1},  {4, 2, 64, 200, 16, true, 1},  {8, 1, 128, 300, 1, false, 1},
      {4, 4, 32, 90, 512, false, 1},  {4, 2, 64, 90, 90, true, 1},   {8, 2, 64, 3000, 100, true, 8},
      {2, 1, 72, 1100, 512, false, 8}, {4, 2, 64, 2049, 64, true, 8},
  };
  uint32_t seed = 11;
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (const Case& c : cases) {
      SetMaxThreads(c.threads);
      SCOPED_TRACE(::testing::Message() << IsaName(isa) << " n=" << c.n << " w=" << c.w
                                        << (c.scattered ? " scattered" : " all"));
      std::vector<int32_t> pos(c.n);
      std::iota(pos.begin(), pos.end(), 0);
      if (c.scattered) {  // a few rows in random order, the last key included
        std::shuffle(pos.begin(), pos.end(), std::mt19937(seed));
        pos.resize(std::min(c.n, 13));
        pos[0] = c.n - 1;
      }
      const auto q = RandomVec(pos.size() * c.heads * c.D, seed++);
      const auto k = RandomVec(size_t(c.kvh) * c.n * c.D, seed++);
      const auto v = RandomVec(size_t(c.kvh) * c.n * c.D, seed++);
      std::vector<float> out(q.size(), -7.0f);
      AttentionParams ap;
      ap.num_heads = c.heads;
      ap.num_kv_heads = c.kvh;
      ap.head_dim = c.D;
      ap.window = c.w;
      const int64_t rows = static_cast<int64_t>(pos.size());
      ASSERT_TRUE(SelectiveAttention(
                      TensorView::Contiguous(q.data(), DType::kF32, {rows, c.heads, c.D}), pos.data(),
                      TensorView::Contiguous(k.data(), DType::kF32, {c.kvh, c.n, c.D}),
                      TensorView::Contiguous(v.data(), DType::kF32, {c.kvh, c.n, c.D}),
                      TensorView::Contiguous(out.data(), DType::kF32, {rows, c.heads, c.D}), ap)
                      .ok());
      EXPECT_LE(WorstError(out, Reference(q, k, v, pos, c.heads, c.kvh, c.D, c.n, c.w)), 2e-5);
      if (c.w < c.n) {  // and it is not the unwindowed answer
        EXPECT_GT(WorstError(out, Reference(q, k, v, pos, c.heads, c.kvh, c.D, c.n, 0)), 1e-3);
      }
    }
  }
  SetMaxThreads(saved);
}

TEST(WindowAttentionTest, NegativeWindowIsRejected) {
  std::vector<float> q(64), k(64), v(64), out(64);
  const int32_t pos = 0;
  AttentionParams ap;
  ap.num_heads = ap.num_kv_heads = 1;
  ap.head_dim = 64;
  ap.window = -1;
  EXPECT_FALSE(SelectiveAttention(TensorView::Contiguous(q.data(), DType::kF32, {1, 1, 64}), &pos,
                                  TensorView::Contiguous(k.data(), DType::kF32, {1, 1, 64}),
                                  TensorView::Contiguous(v.data(), DType::kF32, {1, 1, 64}),
                                  TensorView::Contiguous(out.data(), DType::kF32, {1, 1, 64}), ap)
                   .ok());
}

// ggml's rule, restated from ggml-cpu (vec.h ggml_vec_geglu_f32 and the
// table built in ggml-cpu.c): every f16 value, both cut-offs, and a
// plain-f32 GELU differs (so the rounding is really applied).
float GgmlGeglu(float x, float g) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x * g;
  const float f = HalfToFloat(FloatToHalf(x));
  const float gelu = 0.5f * f * (1.0f + tanhf(0.79788456080286535587989211986876f * f * (1.0f + 0.044715f * f * f)));
  return HalfToFloat(FloatToHalf(gelu)) * g;
}

TEST(GeGluGgmlTest, EqualsGgmlsRuleOnEveryHalfAndTheCutoffs) {
  std::vector<float> x;
  for (uint32_t i = 0; i < 65536; ++i) {
    const float f = HalfToFloat(static_cast<uint16_t>(i));
    if (std::isfinite(f)) x.push_back(f);
  }
  for (float f : {-10.0f, 10.0f, -10.001f, 10.001f, -9.999f, 9.999f, 0.3333333f, -1.2345678f, 2.7182817f}) {
    x.push_back(f);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> up(n), out(n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  for (float& u : up) u = ud(rng);
  ASSERT_TRUE(GeGluGgml(TensorView::Contiguous(x.data(), DType::kF32, {1, n}),
                        TensorView::Contiguous(up.data(), DType::kF32, {1, n}),
                        TensorView::Contiguous(out.data(), DType::kF32, {1, n}))
                  .ok());
  int64_t differ_from_f32 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = GgmlGeglu(x[i], up[i]);
    ASSERT_TRUE(out[i] == want || (std::isnan(out[i]) && std::isnan(want)))
        << "x=" << x[i] << " got " << out[i] << " want " << want;
    const float plain = 0.5f * x[i] * (1.0f + tanhf(0.79788456f * x[i] * (1.0f + 0.044715f * x[i] * x[i]))) * up[i];
    differ_from_f32 += std::abs(plain - out[i]) > 1e-6f * (1 + std::abs(plain));
  }
  EXPECT_GT(differ_from_f32, n / 8);  // 23% of the finite halves (most others are tiny or past the cut-offs)
  EXPECT_EQ(GeluGgmlScalar(-10.0f), 0.0f);
  EXPECT_EQ(GeluGgmlScalar(10.0f), 10.0f);
}

}  // namespace
}  // namespace ragkv::kernels
