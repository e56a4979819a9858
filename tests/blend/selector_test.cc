// Recompute selectors and the adaptive ratio (BlendOptions::selector,
// adaptive_mass): their contracts on a small synthetic model.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "blend/blender.h"
#include "blend/internal/selectors.h"
#include "blend/recompute_budget.h"
#include "blend_test_util.h"

namespace ragkv::blend {
namespace {

using testing::MaxAbsDiff;
using testing::Prompt;
using testing::RandomPrompt;

constexpr Selector kAll[] = {Selector::kDeviation, Selector::kChunkHead,
                             Selector::kQueryAttention, Selector::kDeviationAttention,
                             Selector::kAttendedDeviation, Selector::kLookaheadDeviation};

class SelectorTest : public testing::ModelBlenderTest {
 protected:
  absl::StatusOr<BlendResult> Run(const Prompt& p, const BlendOptions& o) {
    auto segs = p.Segments();
    return blender_->Blend(segs, o);
  }
};

TEST_F(SelectorTest, EverySelectorKeepsTheBudgetQueryAndMissedRows) {
  // Prefix 8 (exact) + 4 chunks x 20 (chunk 2 missed) + query 6.
  Prompt p = RandomPrompt(*model_, 3, 4, 20, /*missed=*/2);
  const int64_t missed_begin = p.Offset(3);
  for (Selector sel : kAll) {
    for (Filtering f : {Filtering::kGradual, Filtering::kSingleCheck}) {
      for (double ratio : {0.05, 0.15, 0.3}) {
        BlendOptions o;
        o.selector = sel;
        o.filtering = f;
        o.ratio = ratio;
        auto r = Run(p, o);
        ASSERT_TRUE(r.ok()) << r.status();
        ASSERT_EQ(r->selectable_tokens, 60);
        const auto& last = r->recomputed.back();
        EXPECT_EQ(last.size(), 26u + std::llround(ratio * 60)) << SelectorName(sel) << " " << ratio;
        std::set<int32_t> s(last.begin(), last.end());
        for (int64_t q = r->query_begin; q < r->total_tokens; ++q) EXPECT_TRUE(s.count(q));
        for (int64_t m = missed_begin; m < missed_begin + 20; ++m) EXPECT_TRUE(s.count(m));
        for (int32_t pos : s) EXPECT_GE(pos, 8);
        EXPECT_DOUBLE_EQ(r->applied_ratio, ratio);
      }
    }
  }
}

TEST_F(SelectorTest, FullRatioEqualsFullPrefillAndRunsAreDeterministic) {
  Prompt p = RandomPrompt(*model_, 4);
  const auto all = p.AllTokens();
  auto cache = model_->NewCache(static_cast<int64_t>(all.size()));
  ASSERT_TRUE(cache.ok());
  const int V = model_->config().vocab_size;
  std::vector<float> ref(all.size() * V);
  model::Workspace ws;
  ASSERT_TRUE(model_->Prefill(all, &*cache, &ws, model::LogitsMode::kAll, ref.data()).ok());
  for (Selector sel : kAll) {
    BlendOptions o;
    o.selector = sel;
    o.ratio = 1.0;
    o.logits = QueryLogits::kAll;
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LT(MaxAbsDiff(r->logits.data(), ref.data() + r->query_begin * V, 6 * V), 1e-4)
        << SelectorName(sel);
    o.ratio = 0.15;
    auto a = Run(p, o), b = Run(p, o);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->recomputed, b->recomputed) << SelectorName(sel);
    EXPECT_EQ(a->logits, b->logits) << SelectorName(sel);
  }
}

TEST_F(SelectorTest, ChunkHeadTakesTheFirstRowsOfEveryChunk) {
  Prompt p = RandomPrompt(*model_, 5, 3, 20);  // chunks at 8, 28, 48
  BlendOptions o;
  o.selector = Selector::kChunkHead;
  o.ratio = 0.1;  // 6 of 60: two per chunk
  auto r = Run(p, o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int32_t> cached;
  for (int32_t pos : r->recomputed.back()) {
    if (pos < r->query_begin) cached.push_back(pos);
  }
  EXPECT_EQ(cached, (std::vector<int32_t>{8, 9, 28, 29, 48, 49}));
}

TEST_F(SelectorTest, ALookaheadHorizonKeepsTheBudgetAndCoveringEveryLayerIsTheFullLookahead) {
  Prompt p = RandomPrompt(*model_, 9, 4, 20);
  const int L = model_->config().n_layers;
  ASSERT_GE(L, 3);
  BlendOptions o;
  o.selector = Selector::kLookaheadDeviation;
  o.ratio = 0.15;
  o.logits = QueryLogits::kAll;
  auto full = Run(p, o);
  ASSERT_TRUE(full.ok()) << full.status();
  o.lookahead_layers = L;  // from the first check (layer 1) past the last layer
  auto same = Run(p, o);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->recomputed, full->recomputed);
  EXPECT_EQ(same->logits, full->logits);
  for (int h = 1; h + 1 < L; ++h) {
    o.lookahead_layers = h;
    auto a = Run(p, o), b = Run(p, o);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->recomputed.back().size(), full->recomputed.back().size()) << h;
    EXPECT_EQ(a->recomputed, b->recomputed) << h;
  }
  o.lookahead_layers = -1;
  EXPECT_EQ(Run(p, o).status().code(), absl::StatusCode::kInvalidArgument);
}

// A check past the look-ahead's reach (the checks between ranked nothing:
// their candidates were all kept) starts it anew there: nothing is written
// into a layer the blend has finished. Every layer's K/V as on_layer_done
// saw it is the final cache's.
TEST(SelectorHorizon, ALaterCheckNeverWritesIntoAFinishedLayer) {
  const std::unique_ptr<model::Model> m = testing::SmallModel(kernels::DType::kF32, 7, 6);
  auto blender = Blender::Create({m.get()});
  ASSERT_TRUE(blender.ok());
  // 8 selectable rows at r = 0.15: the checks at layers 1-4 keep 2, 2, 2
  // and 1, so only layers 1 and 4 rank.
  Prompt p = RandomPrompt(*m, 21, /*chunks=*/1, /*chunk_tokens=*/8);
  for (int h : {0, 1}) {
    BlendOptions o;
    o.selector = Selector::kLookaheadDeviation;
    o.ratio = 0.15;
    o.lookahead_layers = h;
    std::vector<std::vector<float>> seen(6);
    o.on_layer_done = [&](int l, const model::KVCache& c, absl::Span<const int32_t>) {
      model::KVCache& cache = const_cast<model::KVCache&>(c);
      const int64_t n = m->config().n_kv_heads * cache.capacity_tokens() * m->config().head_dim;
      seen[l].assign(cache.k_data(l), cache.k_data(l) + n);
      seen[l].insert(seen[l].end(), cache.v_data(l), cache.v_data(l) + n);
      return absl::OkStatus();
    };
    auto segs = p.Segments();
    auto r = (*blender)->Blend(segs, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->selectable_tokens, 8);
    for (int l = 0; l < 6; ++l) {
      const int64_t n = static_cast<int64_t>(seen[l].size()) / 2;
      ASSERT_GT(n, 0);
      EXPECT_EQ(std::vector<float>(r->cache.k_data(l), r->cache.k_data(l) + n),
                std::vector<float>(seen[l].begin(), seen[l].begin() + n))
          << "horizon " << h << " layer " << l;
      EXPECT_EQ(std::vector<float>(r->cache.v_data(l), r->cache.v_data(l) + n),
                std::vector<float>(seen[l].begin() + n, seen[l].end()))
          << "horizon " << h << " layer " << l;
    }
  }
}

TEST(QueryAttentionScores, MassFollowsTheSoftmaxOfTheQuery) {
  // One query row, 2 heads over 1 kv head, head_dim 2, 3 context keys.
  const float keys[] = {1, 0, 0, 1, 0, 0};  // k0 = e0, k1 = e1, k2 = 0
  const float q[] = {4, 0, 0, 4};           // head 0 looks at e0, head 1 at e1
  internal::KeyPlane plane{keys, 6, 2, 1};
  const std::vector<int32_t> cand = {0, 1, 2};
  float score[3];
  const std::vector<int32_t> qpos = {3};
  ASSERT_TRUE(internal::QueryAttentionScores(q, qpos, 2, plane, {}, 3, cand, score).ok());
  // Head 0: logits {4, 0, 0} / sqrt(2); head 1: {0, 4, 0} / sqrt(2).
  const double e = std::exp(4 / std::sqrt(2.0)), z = e + 2;
  EXPECT_NEAR(score[0], e / z + 1 / z, 1e-5);
  EXPECT_NEAR(score[1], 1 / z + e / z, 1e-5);
  EXPECT_NEAR(score[2], 2 / z, 1e-5);
  EXPECT_NEAR(score[0] + score[1] + score[2], 2.0, 1e-5);  // one unit per head
}

TEST(QueryAttentionScores, TheLayersScaleAndSlidingWindowApply) {
  // As above with the logit scale 0.5 and a window of 2: the query at
  // position 3 sees keys 2..3, so of the context (0..2) only key 2; a query
  // at 5 sees none of it; at 2 (window 4) all three.
  const float keys[] = {1, 0, 0, 1, 0.5f, 0.5f};
  const float q[] = {4, 0, 0, 4, 4, 0, 0, 4};
  internal::KeyPlane plane{keys, 6, 2, 1};
  const std::vector<int32_t> cand = {0, 1, 2};
  const std::vector<int32_t> qpos = {3, 5};
  float score[3];
  ASSERT_TRUE(internal::QueryAttentionScores(q, qpos, 2, plane, {0.5f, 2}, 3, cand, score).ok());
  EXPECT_NEAR(score[0], 0, 1e-6);
  EXPECT_NEAR(score[1], 0, 1e-6);
  EXPECT_NEAR(score[2], 2.0, 1e-5);  // the row at 3: all of both heads; the row at 5: nothing
  const std::vector<int32_t> one = {2};
  ASSERT_TRUE(internal::QueryAttentionScores(q, one, 2, plane, {0.5f, 4}, 3, cand, score).ok());
  // Naive: head 0 logits 0.5 x {4, 0, 2}, head 1 0.5 x {0, 4, 2}.
  const double a = std::exp(2.0), b = 1.0, c = std::exp(1.0), z = a + b + c;
  EXPECT_NEAR(score[0], (a + b) / z, 1e-5);
  EXPECT_NEAR(score[1], (b + a) / z, 1e-5);
  EXPECT_NEAR(score[2], 2 * c / z, 1e-5);
}

TEST(SelectorScores, AttendedDeviationWeighsEachRowsDeviationByItsAttention) {
  float dev[] = {4, 1, 2, 0};
  const float att[] = {0.01f, 1.5f, 0.5f, 2.0f};
  internal::MultiplyBy(att, 4, dev);
  // The largest deviation the query barely reads falls behind a smaller one
  // it reads; a row without deviation stays last however much it is read.
  EXPECT_FLOAT_EQ(dev[0], 0.04f);
  EXPECT_FLOAT_EQ(dev[1], 1.5f);
  EXPECT_FLOAT_EQ(dev[2], 1.0f);
  EXPECT_FLOAT_EQ(dev[3], 0.0f);
}

TEST_F(SelectorTest, AdaptiveRatioIsBoundedAndKeepsWhatItChose) {
  Prompt p = RandomPrompt(*model_, 6, 4, 20, /*missed=*/-1);  // 80 selectable
  for (Selector sel : kAll) {
    for (double mass : {1e-6, 0.5, 0.9, 1.0}) {
      BlendOptions o;
      o.selector = sel;
      o.ratio = 0.3;
      o.adaptive_mass = mass;
      o.adaptive_min = 0.05;
      auto r = Run(p, o);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_GE(r->applied_ratio, 0.05);
      EXPECT_LE(r->applied_ratio, 0.3);
      EXPECT_EQ(r->recomputed.back().size(), 6u + std::llround(r->applied_ratio * 80));
      if (mass == 1e-6) EXPECT_DOUBLE_EQ(r->applied_ratio, 0.05);  // one row: clamped up
      if (mass == 1.0) EXPECT_DOUBLE_EQ(r->applied_ratio, 0.3);    // every row: the cap
    }
  }
}

TEST_F(SelectorTest, AdaptiveMassIsTheSameErrorUnitForEverySelector) {
  // The mass is measured in one estimated error (deviation x the query's
  // attention) whatever ranks the rows. attended-deviation ranks by exactly
  // that error, so it covers any mass with the fewest rows: every other
  // selector needs at least as many; and with every selector the count only
  // grows with the mass.
  Prompt p = RandomPrompt(*model_, 8, 4, 20, /*missed=*/-1);  // 80 selectable
  for (double mass : {0.3, 0.6, 0.9}) {
    std::vector<double> chosen;
    for (Selector sel : kAll) {
      BlendOptions o;
      o.selector = sel;
      o.ratio = 1.0;
      o.adaptive_mass = mass;
      o.adaptive_min = 0;
      auto r = Run(p, o);
      ASSERT_TRUE(r.ok()) << r.status();
      chosen.push_back(r->applied_ratio);
    }
    const double best = chosen[4];  // kAttendedDeviation
    EXPECT_GT(best, 0.0) << mass;
    for (size_t i = 0; i < chosen.size(); ++i) {
      EXPECT_GE(chosen[i], best - 1e-12) << SelectorName(kAll[i]) << " mass " << mass;
    }
    EXPECT_GT(chosen[1], best) << "chunk-head ignores the error: more rows for the same mass";
  }
  double last = 0;
  for (double mass : {0.2, 0.4, 0.6, 0.8, 0.95}) {
    BlendOptions o;
    o.selector = Selector::kDeviation;
    o.ratio = 1.0;
    o.adaptive_mass = mass;
    o.adaptive_min = 0;
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GE(r->applied_ratio, last) << mass;
    last = r->applied_ratio;
  }
}

TEST(SelectorScores, RelativeDeviationMatchesANaiveSum) {
  // f32 [kv_heads 2, n 5, head_dim 3]; tolerance 1e-5 relative (float sums).
  const int64_t H = 2, n = 5, d = 3;
  std::vector<float> fk(H * n * d), ck(H * n * d), fv(H * n * d), cv(H * n * d);
  for (size_t i = 0; i < fk.size(); ++i) {
    ck[i] = std::sin(0.7f * i) + 0.1f;
    fk[i] = ck[i] + 0.05f * std::cos(1.3f * i);
    cv[i] = 2.0f * std::cos(0.4f * i);
    fv[i] = cv[i] + 0.2f * std::sin(0.9f * i);
  }
  using kernels::DType;
  using kernels::TensorView;
  auto view = [&](std::vector<float>& b) { return TensorView::Contiguous(b.data(), DType::kF32, {H, n, d}); };
  std::vector<float> got(n);
  ASSERT_TRUE(internal::RelativeDeviation(view(fk), view(ck), view(fv), view(cv), got.data()).ok());
  double nk = 0, nv = 0;
  for (size_t i = 0; i < ck.size(); ++i) nk += ck[i] * double(ck[i]), nv += cv[i] * double(cv[i]);
  nk /= n, nv /= n;  // the mean squared norm of one cached row
  for (int64_t t = 0; t < n; ++t) {
    double dk = 0, dv = 0;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < d; ++c) {
        const int64_t i = (h * n + t) * d + c;
        dk += (fk[i] - ck[i]) * double(fk[i] - ck[i]);
        dv += (fv[i] - cv[i]) * double(fv[i] - cv[i]);
      }
    }
    const double want = dk / nk + dv / nv;
    EXPECT_NEAR(got[t], want, 1e-5 * want) << t;
  }
}

TEST(SelectorScores, ThresholdCountCountsRowsAboveTSqrtTotal) {
  const std::vector<float> err = {0.04f, 0.01f, 0.0f, 0.25f, 0.09f, -1.0f};  // total 0.39
  for (double t : {0.0, 0.01, 0.1, 0.2, 0.5}) {
    const double cut = t * std::sqrt(0.39);
    int64_t want = 0;
    for (float e : err) want += e >= cut;
    EXPECT_EQ(internal::ThresholdCount(err.data(), static_cast<int64_t>(err.size()), t), want) << t;
  }
}

TEST_F(SelectorTest, AdaptiveThresholdGivesMoreRowsWhenLowerAndIsBounded) {
  Prompt p = RandomPrompt(*model_, 8, 4, 20, /*missed=*/-1);  // 80 selectable
  double last = 2.0;
  for (double t : {1e-6, 1e-4, 1e-3, 1e-2, 1e-1}) {
    BlendOptions o;
    o.ratio = 0.5;
    o.adaptive_threshold = t;
    o.adaptive_mass = 0.99;  // overridden by the threshold
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->applied_ratio, last + 1e-12) << t;
    EXPECT_GE(r->applied_ratio, o.adaptive_min - 1e-12) << t;
    EXPECT_LE(r->applied_ratio, o.ratio + 1e-12) << t;
    last = r->applied_ratio;
  }
  BlendOptions bad;
  bad.adaptive_threshold = -1;
  EXPECT_EQ(Run(p, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SelectorTest, BadAdaptiveOptionsAreRefused) {
  Prompt p = RandomPrompt(*model_, 7);
  BlendOptions o;
  o.adaptive_mass = 0.5;
  o.selector = Selector::kDeviation;
  o.adaptive_min = 0.5;  // above ratio 0.15
  EXPECT_EQ(Run(p, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.adaptive_min = 0.02;
  o.adaptive_mass = 1.5;
  EXPECT_EQ(Run(p, o).status().code(), absl::StatusCode::kInvalidArgument);
  // Under a budget, a floor above it would break the budget's ceiling.
  auto budget = RecomputeBudget::Create({0.05, 8});
  ASSERT_TRUE(budget.ok());
  o.adaptive_mass = 0;
  o.recompute_budget = budget->get();
  o.adaptive_min = 0.1;  // under ratio 0.15, above the budget
  EXPECT_EQ(Run(p, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.adaptive_min = 0.05;
  const auto at_budget = Run(p, o);
  EXPECT_TRUE(at_budget.ok()) << at_budget.status();
  o.recompute_budget = nullptr;
  Selector s;
  EXPECT_TRUE(ParseSelector("query-attention", &s));
  EXPECT_EQ(s, Selector::kQueryAttention);
  EXPECT_FALSE(ParseSelector("random", &s));
  for (Selector sel : kAll) {
    ASSERT_TRUE(ParseSelector(SelectorName(sel), &s)) << SelectorName(sel);
    EXPECT_EQ(s, sel);
  }
}

}  // namespace
}  // namespace ragkv::blend
