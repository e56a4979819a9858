// Selective causal attention vs a naive double-precision reference.
// Tolerance: |out - ref| <= 2e-5 * (1 + |ref|) (f32 accumulation over up to
// 4096 keys with inputs in [-1, 1]; observed errors are ~1e-6).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu.h"
#include "tests/kernels/test_util.h"

namespace ragkv::kernels {
namespace {

using testing::IsaScope;
using testing::Isas;
using testing::RandomVec;

struct Problem {
  int rows, heads, kv_heads, head_dim, kv_len;
  std::vector<float> q, k, v;
  std::vector<int32_t> pos;
};

Problem MakeProblem(int heads, int kv_heads, int head_dim, int kv_len, std::vector<int32_t> pos,
                    uint32_t seed) {
  Problem p{static_cast<int>(pos.size()), heads, kv_heads, head_dim, kv_len, {}, {}, {}, {}};
  p.q = RandomVec(static_cast<size_t>(p.rows) * heads * head_dim, seed);
  p.k = RandomVec(static_cast<size_t>(kv_heads) * kv_len * head_dim, seed + 1);
  p.v = RandomVec(static_cast<size_t>(kv_heads) * kv_len * head_dim, seed + 2);
  p.pos = std::move(pos);
  return p;
}

// Naive reference. limit(r) = last visible key; mask may be null.
std::vector<float> Reference(const Problem& p, CausalMode mode, const float* mask = nullptr,
                             float scale = 0.0f) {
  const int D = p.head_dim, g = p.heads / p.kv_heads;
  const double sc = scale != 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<float> out(p.q.size(), 0.0f);
  std::vector<double> s(p.kv_len);
  for (int r = 0; r < p.rows; ++r) {
    const int64_t limit =
        mode == CausalMode::kExact ? p.pos[r] : static_cast<int64_t>(p.kv_len) - p.rows + r;
    for (int h = 0; h < p.heads; ++h) {
      const int kh = h / g;
      const float* qv = &p.q[(static_cast<size_t>(r) * p.heads + h) * D];
      double mx = -INFINITY;
      for (int64_t j = 0; j <= limit; ++j) {
        const float* kv = &p.k[(static_cast<size_t>(kh) * p.kv_len + j) * D];
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += static_cast<double>(qv[d]) * kv[d];
        s[j] = dot * sc + (mask ? mask[static_cast<size_t>(r) * p.kv_len + j] : 0.0);
        mx = std::max(mx, s[j]);
      }
      float* o = &out[(static_cast<size_t>(r) * p.heads + h) * D];
      if (limit < 0 || mx == -INFINITY) continue;
      double sum = 0;
      std::vector<double> acc(D, 0.0);
      for (int64_t j = 0; j <= limit; ++j) {
        const double e = std::exp(s[j] - mx);
        sum += e;
        const float* vv = &p.v[(static_cast<size_t>(kh) * p.kv_len + j) * D];
        for (int d = 0; d < D; ++d) acc[d] += e * vv[d];
      }
      for (int d = 0; d < D; ++d) o[d] = static_cast<float>(acc[d] / sum);
    }
  }
  return out;
}

absl::Status RunAttn(const Problem& p, std::vector<float>* out, CausalMode mode = CausalMode::kExact,
                 const float* mask = nullptr, const float* k = nullptr, const float* v = nullptr) {
  out->assign(p.q.size(), -7.0f);
  AttentionParams params;
  params.num_heads = p.heads;
  params.num_kv_heads = p.kv_heads;
  params.head_dim = p.head_dim;
  params.causal = mode;
  params.additive_mask = mask;
  auto qv = TensorView::Contiguous(p.q.data(), DType::kF32, {p.rows, p.heads, p.head_dim});
  auto kv = TensorView::Contiguous(k ? k : p.k.data(), DType::kF32,
                                   {p.kv_heads, p.kv_len, p.head_dim});
  auto vv = TensorView::Contiguous(v ? v : p.v.data(), DType::kF32,
                                   {p.kv_heads, p.kv_len, p.head_dim});
  auto ov = TensorView::Contiguous(out->data(), DType::kF32, {p.rows, p.heads, p.head_dim});
  return SelectiveAttention(qv, p.pos.data(), kv, vv, ov, params);
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": element " << worst_i << " got " << got[worst_i] << " want "
                        << want[worst_i];
}

std::vector<int32_t> AllRows(int n) {
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  return pos;
}

std::vector<int32_t> Scattered(int n, int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> all = AllRows(n);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min(rows, n));
  return all;  // unsorted on purpose
}

constexpr double kTol = 2e-5;

TEST(SelectiveAttentionTest, MatchesReferenceAcrossShapesAndIsas) {
  struct Case {
    int heads, kv_heads, head_dim, kv_len, rows;
  };
  const Case cases[] = {
      {1, 1, 64, 1, 1},    {2, 2, 64, 37, 37},    {4, 2, 128, 130, 19}, {8, 2, 64, 200, 7},
      {8, 1, 128, 129, 1}, {8, 4, 8, 70, 70},     {16, 2, 72, 97, 33},  {4, 4, 3, 65, 20},
      {6, 3, 66, 300, 61}, {32, 4, 128, 257, 9},
  };
  uint32_t seed = 1;
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << IsaName(isa) << " H=" << c.heads << " KVH="
                                        << c.kv_heads << " D=" << c.head_dim << " N=" << c.kv_len
                                        << " rows=" << c.rows);
      auto pos = c.rows == c.kv_len ? AllRows(c.kv_len) : Scattered(c.kv_len, c.rows, seed);
      Problem p = MakeProblem(c.heads, c.kv_heads, c.head_dim, c.kv_len, pos, seed++);
      std::vector<float> out;
      ASSERT_TRUE(RunAttn(p, &out).ok());
      ExpectNear(out, Reference(p, CausalMode::kExact), kTol, "exact");
    }
  }
}

TEST(SelectiveAttentionTest, RandomConfigurations) {
  // Random small problems that reach every code path: dot-product QK (<= 4
  // query vectors), full and half register blocks, PV blocks with per-row
  // tails, head_dim remainders, 1..8 threads (split keys), duplicate rows.
  std::mt19937 rng(2024);
  const int saved = MaxThreads();
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (int trial = 0; trial < 40; ++trial) {
      const int kvh = 1 + static_cast<int>(rng() % 3);
      const int g = 1 << (rng() % 4);  // 1, 2, 4, 8
      const int hd_choices[] = {1, 4, 8, 16, 24, 33, 64, 80, 128};
      const int hd = hd_choices[rng() % 9];
      const int n = 1 + static_cast<int>(rng() % 700);
      const int rows = 1 + static_cast<int>(rng() % std::min(n + 3, 40));
      std::vector<int32_t> pos(rows);
      for (auto& x : pos) x = static_cast<int32_t>(rng() % n);
      SetMaxThreads(1 + static_cast<int>(rng() % 8));
      SCOPED_TRACE(::testing::Message() << IsaName(isa) << " trial " << trial << " KVH=" << kvh
                                        << " g=" << g << " hd=" << hd << " N=" << n
                                        << " rows=" << rows << " threads=" << MaxThreads());
      Problem p = MakeProblem(g * kvh, kvh, hd, n, pos, 1000 + trial);
      std::vector<float> out;
      ASSERT_TRUE(RunAttn(p, &out).ok());
      ExpectNear(out, Reference(p, CausalMode::kExact), kTol, "random");
    }
  }
  SetMaxThreads(saved);
}

TEST(SelectiveAttentionTest, LongContextGqaRatios) {
  // N = 4096, head_dim 128, GQA 1/2/4/8, scattered rows plus the last row.
  int ratio_seed = 100;
  for (int g : {1, 2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << "g=" << g);
    auto pos = Scattered(4096, 12, ratio_seed);
    pos.push_back(4095);
    Problem p = MakeProblem(g * 1, 1, 128, 4096, pos, ratio_seed++);
    std::vector<float> out;
    ASSERT_TRUE(RunAttn(p, &out).ok());
    ExpectNear(out, Reference(p, CausalMode::kExact), kTol, "long");
  }
}

TEST(SelectiveAttentionTest, SelectedRowsEqualFullPrefillRows) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    const int n = 333;
    Problem full = MakeProblem(8, 2, 64, n, AllRows(n), 7);
    std::vector<float> full_out;
    ASSERT_TRUE(RunAttn(full, &full_out).ok());
    ExpectNear(full_out, Reference(full, CausalMode::kExact), kTol, "full");
    // Pick scattered rows; their q rows are the full problem's rows.
    auto pos = Scattered(n, 41, 9);
    Problem sel = full;
    sel.rows = static_cast<int>(pos.size());
    sel.pos = pos;
    sel.q.clear();
    const size_t row = static_cast<size_t>(full.heads) * full.head_dim;
    for (int32_t r : pos) sel.q.insert(sel.q.end(), &full.q[r * row], &full.q[(r + 1) * row]);
    std::vector<float> sel_out;
    ASSERT_TRUE(RunAttn(sel, &sel_out).ok());
    for (size_t i = 0; i < pos.size(); ++i) {
      for (size_t e = 0; e < row; ++e) {
        ASSERT_NEAR(sel_out[i * row + e], full_out[pos[i] * row + e], 1e-6)
            << IsaName(isa) << " row " << pos[i];
      }
    }
  }
}

TEST(SelectiveAttentionTest, ScatteredRowsNeverReadFutureKeys) {
  // Keys and values after a victim position are NaN; every row at or before
  // it must still match the clean reference (rows after it legitimately see
  // NaN and are not checked). Rows share tiles, so this checks the per-row
  // limits inside a tile, not just tile skipping.
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    for (int trial = 0; trial < 6; ++trial) {
      const int n = 150 + 97 * trial;
      auto pos = Scattered(n, 25 + trial * 7, 40 + trial);
      Problem p = MakeProblem(4, 2, trial % 2 ? 128 : 64, n, pos, 50 + trial);
      std::vector<float> ref = Reference(p, CausalMode::kExact);
      std::vector<int32_t> sorted = pos;
      std::sort(sorted.begin(), sorted.end());
      const int32_t victim = sorted[sorted.size() / 2];
      std::vector<float> k = p.k, v = p.v;
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (int h = 0; h < p.kv_heads; ++h)
        for (int j = victim + 1; j < n; ++j)
          for (int d = 0; d < p.head_dim; ++d) {
            k[(static_cast<size_t>(h) * n + j) * p.head_dim + d] = nan;
            v[(static_cast<size_t>(h) * n + j) * p.head_dim + d] = nan;
          }
      std::vector<float> out;
      ASSERT_TRUE(RunAttn(p, &out, CausalMode::kExact, nullptr, k.data(), v.data()).ok());
      const size_t row = static_cast<size_t>(p.heads) * p.head_dim;
      int checked = 0;
      for (int r = 0; r < p.rows; ++r) {
        if (pos[r] > victim) continue;
        ++checked;
        for (size_t e = 0; e < row; ++e) {
          ASSERT_FALSE(std::isnan(out[r * row + e])) << IsaName(isa) << " row pos " << pos[r];
          ASSERT_NEAR(out[r * row + e], ref[r * row + e], kTol * (1 + std::abs(ref[r * row + e])));
        }
      }
      EXPECT_GT(checked, 1);
    }
  }
}

TEST(SelectiveAttentionTest, SplitKeysForFewTasksMatchesReference) {
  // With many threads and few (kv head, row tile) tasks the keys are split
  // into chunks whose partial softmax states are merged (decode path).
  const int saved = MaxThreads();
  SetMaxThreads(8);
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    struct Case {
      int heads, kv_heads, head_dim, kv_len;
      std::vector<int32_t> pos;
    };
    const Case cases[] = {{8, 2, 64, 3000, {2999}},
                          {4, 1, 128, 2049, {5, 1500, 2048}},
                          {2, 2, 32, 1100, {700, 20}}};
    uint32_t seed = 300;
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << IsaName(isa) << " N=" << c.kv_len);
      Problem p = MakeProblem(c.heads, c.kv_heads, c.head_dim, c.kv_len, c.pos, seed++);
      std::vector<float> out;
      ASSERT_TRUE(RunAttn(p, &out).ok());
      ExpectNear(out, Reference(p, CausalMode::kExact), kTol, "split");
      // Poisoned keys after the largest position are never read.
      std::vector<float> k = p.k, v = p.v;
      const int32_t last = *std::max_element(c.pos.begin(), c.pos.end());
      for (int h = 0; h < p.kv_heads; ++h)
        for (int j = last + 1; j < p.kv_len; ++j)
          for (int d = 0; d < p.head_dim; ++d) {
            k[(static_cast<size_t>(h) * p.kv_len + j) * p.head_dim + d] = NAN;
            v[(static_cast<size_t>(h) * p.kv_len + j) * p.head_dim + d] = NAN;
          }
      ASSERT_TRUE(RunAttn(p, &out, CausalMode::kExact, nullptr, k.data(), v.data()).ok());
      ExpectNear(out, Reference(p, CausalMode::kExact), kTol, "split poisoned");
    }
  }
  SetMaxThreads(saved);
}

TEST(SelectiveAttentionTest, AdditiveMask) {
  for (Isa isa : Isas()) {
    IsaScope scope(isa);
    const int n = 190;
    auto pos = Scattered(n, 30, 3);
    pos.push_back(0);
    Problem p = MakeProblem(4, 1, 64, n, pos, 77);
    std::vector<float> mask(static_cast<size_t>(p.rows) * n);
    std::mt19937 rng(5);
    for (int r = 0; r < p.rows; ++r)
      for (int j = 0; j < n; ++j) {
        // Block-sparse: blocks of 16 keys dropped at random, key 0 and the
        // diagonal block kept for most rows; one row fully masked.
        const bool drop = (rng() % 3 == 0) && j / 16 != pos[r] / 16;
        mask[static_cast<size_t>(r) * n + j] =
            r == 5 ? -INFINITY : (drop ? -INFINITY : 0.25f * static_cast<float>(rng() % 5));
      }
    std::vector<float> out;
    ASSERT_TRUE(RunAttn(p, &out, CausalMode::kExact, mask.data()).ok());
    ExpectNear(out, Reference(p, CausalMode::kExact, mask.data()), kTol, "mask");
    // The fully masked row is defined as zeros.
    for (int e = 0; e < p.heads * p.head_dim; ++e) EXPECT_EQ(out[5 * p.heads * p.head_dim + e], 0);
  }
}

TEST(SelectiveAttentionTest, BottomRightMode) {
  const int n = 120;
  auto pos = Scattered(n, 20, 8);
  Problem p = MakeProblem(4, 2, 64, n, pos, 12);
  std::vector<float> out;
  ASSERT_TRUE(RunAttn(p, &out, CausalMode::kBottomRight).ok());
  ExpectNear(out, Reference(p, CausalMode::kBottomRight), kTol, "bottom-right");
  // With all rows in order, both modes agree.
  Problem full = MakeProblem(4, 2, 64, 50, AllRows(50), 13);
  std::vector<float> a, b;
  ASSERT_TRUE(RunAttn(full, &a, CausalMode::kBottomRight).ok());
  ASSERT_TRUE(RunAttn(full, &b, CausalMode::kExact).ok());
  ExpectNear(a, b, 1e-6, "modes agree on full prefill");
}

TEST(SelectiveAttentionTest, StridedViewsAndAliasing) {
  // q and out live inside a [rows, heads*hd + 8] activation buffer; out
  // aliases q.
  const int rows = 23, heads = 4, kvh = 2, D = 64, n = 100, ld = heads * D + 8;
  auto pos = Scattered(n, rows, 21);
  Problem p = MakeProblem(heads, kvh, D, n, pos, 22);
  std::vector<float> ref = Reference(p, CausalMode::kExact);
  std::vector<float> buf(static_cast<size_t>(rows) * ld, 123.0f);
  for (int r = 0; r < rows; ++r)
    std::copy(&p.q[r * heads * D], &p.q[(r + 1) * heads * D], &buf[r * ld]);
  TensorView qv = TensorView::Strided(buf.data(), DType::kF32, {rows, heads, D}, {ld, D, 1});
  AttentionParams params;
  params.num_heads = heads;
  params.num_kv_heads = kvh;
  params.head_dim = D;
  ASSERT_TRUE(SelectiveAttention(qv, pos.data(),
                                 TensorView::Contiguous(p.k.data(), DType::kF32, {kvh, n, D}),
                                 TensorView::Contiguous(p.v.data(), DType::kF32, {kvh, n, D}), qv,
                                 params)
                  .ok());
  for (int r = 0; r < rows; ++r) {
    for (int e = 0; e < heads * D; ++e)
      ASSERT_NEAR(buf[r * ld + e], ref[r * heads * D + e], kTol * (1 + std::abs(ref[r * heads * D + e])));
    for (int e = heads * D; e < ld; ++e) ASSERT_EQ(buf[r * ld + e], 123.0f);
  }
}

TEST(SelectiveAttentionTest, ExplicitScale) {
  Problem p = MakeProblem(2, 1, 16, 40, Scattered(40, 10, 2), 31);
  AttentionParams params;
  params.num_heads = 2;
  params.num_kv_heads = 1;
  params.head_dim = 16;
  params.scale = 0.7f;
  std::vector<float> out(p.q.size());
  ASSERT_TRUE(SelectiveAttention(TensorView::Contiguous(p.q.data(), DType::kF32, {10, 2, 16}),
                                 p.pos.data(),
                                 TensorView::Contiguous(p.k.data(), DType::kF32, {1, 40, 16}),
                                 TensorView::Contiguous(p.v.data(), DType::kF32, {1, 40, 16}),
                                 TensorView::Contiguous(out.data(), DType::kF32, {10, 2, 16}),
                                 params)
                  .ok());
  ExpectNear(out, Reference(p, CausalMode::kExact, nullptr, 0.7f), kTol, "scale");
}

TEST(SelectiveAttentionTest, BadInputs) {
  Problem p = MakeProblem(4, 2, 8, 10, {0, 3, 9}, 1);
  std::vector<float> out(p.q.size());
  AttentionParams params;
  params.num_heads = 4;
  params.num_kv_heads = 2;
  params.head_dim = 8;
  auto q = TensorView::Contiguous(p.q.data(), DType::kF32, {3, 4, 8});
  auto k = TensorView::Contiguous(p.k.data(), DType::kF32, {2, 10, 8});
  auto v = TensorView::Contiguous(p.v.data(), DType::kF32, {2, 10, 8});
  auto o = TensorView::Contiguous(out.data(), DType::kF32, {3, 4, 8});
  EXPECT_TRUE(SelectiveAttention(q, p.pos.data(), k, v, o, params).ok());
  auto bad = [&](TensorView q2, const int32_t* pos2, TensorView k2, TensorView v2, TensorView o2,
                 AttentionParams pr) {
    absl::Status s = SelectiveAttention(q2, pos2, k2, v2, o2, pr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  };
  bad(q, nullptr, k, v, o, params);
  int32_t far[3] = {0, 3, 10};
  bad(q, far, k, v, o, params);
  int32_t neg[3] = {0, -1, 2};
  bad(q, neg, k, v, o, params);
  AttentionParams p3 = params;
  p3.num_kv_heads = 3;
  bad(q, p.pos.data(), k, v, o, p3);
  AttentionParams p0 = params;
  p0.head_dim = 0;
  bad(q, p.pos.data(), k, v, o, p0);
  TensorView nullq = q;
  nullq.data = nullptr;
  bad(nullq, p.pos.data(), k, v, o, params);
  bad(q, p.pos.data(), TensorView::Contiguous(p.k.data(), DType::kF32, {2, 9, 8}), v, o, params);
  bad(q, p.pos.data(), k, v, TensorView::Contiguous(out.data(), DType::kF32, {2, 4, 8}), params);
  bad(q, p.pos.data(), TensorView::Contiguous(p.k.data(), DType::kF16, {2, 10, 8}), v, o, params);
  TensorView strided = k;
  strided.stride[2] = 2;
  bad(q, p.pos.data(), strided, v, o, params);
  // Zero rows is a no-op.
  EXPECT_TRUE(SelectiveAttention(TensorView::Contiguous(p.q.data(), DType::kF32, {0, 4, 8}),
                                 nullptr, k, v,
                                 TensorView::Contiguous(out.data(), DType::kF32, {0, 4, 8}),
                                 params)
                  .ok());
}

}  // namespace
}  // namespace ragkv::kernels
