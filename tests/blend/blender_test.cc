#include "blend/blender.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "blend_test_util.h"

namespace ragkv::blend {
namespace {

using kernels::DType;
using testing::MaxAbsDiff;
using testing::Prompt;
using testing::RandomTokens;
using testing::SmallModel;

class BlenderTest : public testing::ModelBlenderTest {
 protected:
  // A prompt: 8-token system prefix, `chunks` chunks of `chunk_tokens`, a
  // 6-token query; chunk `missed` (if >= 0) has no cache.
  Prompt MakePrompt(uint32_t seed, int chunks = 3, int chunk_tokens = 24, int missed = -1,
                    bool prefix = true) {
    return testing::RandomPrompt(*model_, seed, chunks, chunk_tokens, missed, prefix);
  }
  // Reference: Model::Prefill of the whole prompt (logits of every row).
  struct Reference {
    std::unique_ptr<model::KVCache> cache;
    std::vector<float> logits;
  };
  Reference FullPrefill(const std::vector<int32_t>& tokens) {
    auto cache = model_->NewCache(static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(cache.ok());
    Reference r;
    r.cache = std::make_unique<model::KVCache>(std::move(cache).value());
    r.logits.resize(tokens.size() * model_->config().vocab_size);
    model::Workspace ws;
    EXPECT_TRUE(
        model_->Prefill(tokens, r.cache.get(), &ws, model::LogitsMode::kAll, r.logits.data())
            .ok());
    return r;
  }
  absl::StatusOr<BlendResult> Run(const Prompt& p, BlendOptions o) {
    auto segs = p.Segments();
    return blender_->Blend(segs, o);
  }
  // Max |a-b| over every layer's K and V of tokens [0, n).
  double KvDiff(const model::KVCache& a, const model::KVCache& b, int64_t n, int64_t begin = 0) {
    const auto& c = model_->config();
    double m = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      auto la = a.Layer(l, n), lb = b.Layer(l, n);
      for (int h = 0; h < c.n_kv_heads; ++h) {
        for (auto [x, y] : {std::pair{la.k, lb.k}, std::pair{la.v, lb.v}}) {
          m = std::max(m, MaxAbsDiff(x.as<float>() + h * x.stride[0] + begin * c.head_dim,
                                     y.as<float>() + h * y.stride[0] + begin * c.head_dim,
                                     (n - begin) * c.head_dim));
        }
      }
    }
    return m;
  }
};

TEST_F(BlenderTest, FullRatioEqualsFullPrefill) {
  Prompt p = MakePrompt(1);
  const auto all = p.AllTokens();
  Reference ref = FullPrefill(all);
  for (Filtering f : {Filtering::kGradual, Filtering::kSingleCheck}) {
    BlendOptions o;
    o.ratio = 1.0;
    o.filtering = f;
    o.logits = QueryLogits::kAll;
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->total_tokens, static_cast<int64_t>(all.size()));
    EXPECT_LT(KvDiff(r->cache, *ref.cache, r->total_tokens), 1e-4);
    const int V = model_->config().vocab_size;
    ASSERT_EQ(r->logits_rows, 6);
    EXPECT_LT(MaxAbsDiff(r->logits.data(), ref.logits.data() + r->query_begin * V, 6 * V), 1e-4);
  }
}

TEST_F(BlenderTest, FullPrefillAndPrefixReuseBaselinesEqualPrefill) {
  Prompt p = MakePrompt(2);
  Reference ref = FullPrefill(p.AllTokens());
  const int V = model_->config().vocab_size;
  for (Strategy s : {Strategy::kFullPrefill, Strategy::kPrefixReuse}) {
    BlendOptions o;
    o.strategy = s;
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LT(KvDiff(r->cache, *ref.cache, r->total_tokens), 1e-4) << StrategyName(s);
    EXPECT_LT(MaxAbsDiff(r->logits.data(), ref.logits.data() + (r->total_tokens - 1) * V, V),
              1e-4)
        << StrategyName(s);
  }
}

TEST_F(BlenderTest, ZeroRatioIsConcatenationWithRerotation) {
  Prompt p = MakePrompt(3);
  const auto& c = model_->config();
  for (Strategy s : {Strategy::kCacheBlend, Strategy::kFullReuse}) {
    BlendOptions o;
    o.strategy = s;
    o.ratio = 0.0;
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok()) << r.status();
    // Reference: the cached chunks, re-rotated by a double-precision naive
    // RoPE, imported into a cache; then the query prefilled on top.
    auto ref = model_->NewCache(r->total_tokens);
    ASSERT_TRUE(ref.ok());
    for (size_t seg = 0; seg + 1 < p.tokens.size(); ++seg) {
      const ChunkKV& ck = *p.kv[seg];
      const int64_t off = p.Offset(seg), T = ck.info.num_tokens;
      for (int l = 0; l < c.n_layers; ++l) {
        std::vector<float> k(c.n_kv_heads * T * c.head_dim), v(k.size());
        std::memcpy(k.data(), ck.k[l].data(), k.size() * 4);
        std::memcpy(v.data(), ck.v[l].data(), v.size() * 4);
        for (int64_t row = 0; row < c.n_kv_heads * T; ++row) {
          testing::NaiveRerotate(k.data() + row * c.head_dim, c.head_dim, off, c.rope_theta);
        }
        ASSERT_TRUE(ref->ImportLayer(l, off, T, DType::kF32, k.data(), v.data()).ok());
      }
    }
    ASSERT_TRUE(ref->set_num_tokens(r->query_begin).ok());
    model::Workspace ws;
    std::vector<float> logits(c.vocab_size);
    ASSERT_TRUE(model_->Prefill(p.tokens.back(), &*ref, &ws, model::LogitsMode::kLast,
                                logits.data())
                    .ok());
    EXPECT_LT(KvDiff(r->cache, *ref, r->query_begin), 1e-4) << StrategyName(s);
    EXPECT_LT(KvDiff(r->cache, *ref, r->total_tokens, r->query_begin), 1e-4);
    EXPECT_LT(MaxAbsDiff(r->logits.data(), logits.data(), c.vocab_size), 1e-4);
    // Only the query rows were computed.
    for (int l = 0; l < c.n_layers; ++l) {
      ASSERT_EQ(r->recomputed[l].size(), 6u);
      EXPECT_EQ(r->recomputed[l].front(), r->query_begin);
    }
  }
}

TEST_F(BlenderTest, RerotationAtOffsetZeroIsIdentity) {
  // A chunk placed first (no prefix) keeps its cached KV bit for bit.
  Prompt p = MakePrompt(4, 2, 20, -1, /*prefix=*/false);
  BlendOptions o;
  o.ratio = 0.5;
  auto r = Run(p, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& c = model_->config();
  const ChunkKV& ck = *p.kv[0];
  for (int l = 0; l < c.n_layers; ++l) {
    auto lv = r->cache.Layer(l);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const float* ek = reinterpret_cast<const float*>(ck.k[l].data()) + h * 20 * c.head_dim;
      const float* ev = reinterpret_cast<const float*>(ck.v[l].data()) + h * 20 * c.head_dim;
      EXPECT_EQ(std::memcmp(lv.k.as<float>() + h * lv.k.stride[0], ek, 20 * c.head_dim * 4), 0);
      EXPECT_EQ(std::memcmp(lv.v.as<float>() + h * lv.v.stride[0], ev, 20 * c.head_dim * 4), 0);
    }
    // The exact first chunk is never recomputed.
    for (int32_t pos : r->recomputed[l]) EXPECT_GE(pos, 20);
  }
}

TEST_F(BlenderTest, RecomputeSetAlwaysHoldsQueryAndMissedRows) {
  Prompt p = MakePrompt(5, 4, 20, /*missed=*/2);
  const int64_t missed_begin = p.Offset(3), missed_end = missed_begin + 20;
  for (double ratio : {0.0, 0.05, 0.15, 0.3, 1.0}) {
    for (Filtering f : {Filtering::kGradual, Filtering::kSingleCheck}) {
      BlendOptions o;
      o.ratio = ratio;
      o.filtering = f;
      auto r = Run(p, o);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->selectable_tokens, 60);  // 3 cached chunks x 20 (prefix is exact)
      for (int l = 0; l < model_->config().n_layers; ++l) {
        std::set<int32_t> s(r->recomputed[l].begin(), r->recomputed[l].end());
        EXPECT_TRUE(std::is_sorted(r->recomputed[l].begin(), r->recomputed[l].end()));
        for (int64_t q = r->query_begin; q < r->total_tokens; ++q) EXPECT_TRUE(s.count(q));
        for (int64_t m = missed_begin; m < missed_end; ++m) EXPECT_TRUE(s.count(m));
        for (int32_t pos : s) EXPECT_GE(pos, 8);  // exact prefix never recomputed
      }
      // After the last check layer: exactly round(r * selectable) cached rows.
      const size_t forced = 20 + 6;
      const size_t expect = forced + static_cast<size_t>(std::llround(ratio * 60));
      EXPECT_EQ(r->recomputed.back().size(), expect) << ratio;
      // Layer 0 is full when r > 0.
      EXPECT_EQ(r->recomputed[0].size(), ratio > 0 ? 60 + forced : forced);
    }
  }
}

TEST_F(BlenderTest, ChunkHeadTokensAreAlwaysRecomputed) {
  Prompt p = MakePrompt(13, 3, 20);  // prefix 8 (exact), chunks at 8, 28, 48
  BlendOptions o;
  o.ratio = 0.1;
  o.chunk_head_tokens = 2;
  auto r = Run(p, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->selectable_tokens, 54);  // 3 x (20 - 2)
  for (const auto& rows : r->recomputed) {
    std::set<int32_t> s(rows.begin(), rows.end());
    for (int32_t head : {8, 9, 28, 29, 48, 49}) EXPECT_TRUE(s.count(head)) << head;
  }
  EXPECT_EQ(r->recomputed.back().size(), 6u + 6u + std::llround(0.1 * 54));
}

TEST_F(BlenderTest, GradualScheduleShrinksTowardRatio) {
  BlendOptions o;
  o.ratio = 0.1;
  // The default: layers 1-4, 2r geometrically down to r.
  auto s = MakeSchedule(o, 8);
  ASSERT_EQ(s.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i].layer, 1 + i);
    EXPECT_NEAR(s[i].ratio, 0.2 * std::pow(0.5, i / 3.0), 1e-12) << i;
  }
  EXPECT_EQ(MakeSchedule(o, 3).size(), 2u);  // layers past the last dropped
  EXPECT_DOUBLE_EQ(MakeSchedule(o, 3).back().ratio, 0.1);  // the last is r
  o.gradual_steps = 2;
  s = MakeSchedule(o, 8);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].layer, 1);
  EXPECT_DOUBLE_EQ(s[0].ratio, 0.2);
  EXPECT_EQ(s[1].layer, 2);
  EXPECT_DOUBLE_EQ(s[1].ratio, 0.1);
  o.filtering = Filtering::kSingleCheck;
  s = MakeSchedule(o, 8);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].layer, 1);
  o.ratio = 0;
  EXPECT_TRUE(MakeSchedule(o, 8).empty());
}

// RowsByLayer: the Blender's count, by hand: every selectable row at layer
// 0, round(r_i x S) at each check (half away from zero), never more than
// are left (a later, larger ratio cuts nothing and probes nothing).
TEST(RowsByLayerTest, HandCounts) {
  const std::vector<CheckLayer> s = {{1, 0.2}, {2, 0.1}, {3, 0.15}};
  const std::vector<LayerRows> r = RowsByLayer(s, 5, 25, true);
  ASSERT_EQ(r.size(), 5u);
  const double selected[] = {25, 5, 3, 3, 3};  // 0.2 x 25 = 5; 0.1 x 25 = 2.5 -> 3
  const double probed[] = {0, 25, 5, 0, 0};
  for (int l = 0; l < 5; ++l) {
    EXPECT_DOUBLE_EQ(r[l].selected, selected[l]) << l;
    EXPECT_DOUBLE_EQ(r[l].probed, probed[l]) << l;
  }
  for (const LayerRows& z : RowsByLayer(s, 5, 25, false)) {  // r = 0: nothing
    EXPECT_EQ(z.selected, 0);
    EXPECT_EQ(z.probed, 0);
  }
  EXPECT_DOUBLE_EQ(RowsKept(0.5, 9, 100), 5);  // 4.5 -> 5
  EXPECT_DOUBLE_EQ(RowsKept(0.5, 9, 3), 3);
}

// docs/gemma3.md rule 4: on a model with sliding-window layers the default
// schedule starts at the first global layer (pattern p: layer p - 1); an
// explicit first_check_layer is honoured; a model without a window keeps 1.
TEST_F(BlenderTest, SlidingWindowModelsCheckFirstAtTheFirstGlobalLayer) {
  model::ModelConfig c;
  c.n_layers = 12;
  BlendOptions o;
  o.ratio = 0.1;
  o.gradual_steps = 2;
  EXPECT_EQ(MakeSchedule(o, c)[0].layer, 1);
  c.sliding_window = 16;
  for (int pattern : {2, 3, 6}) {
    c.swa_pattern = pattern;
    const auto s = MakeSchedule(o, c);
    ASSERT_EQ(s.size(), 2u) << pattern;
    EXPECT_EQ(s[0].layer, pattern - 1) << pattern;
    EXPECT_FALSE(c.IsSwaLayer(s[0].layer)) << pattern;
    EXPECT_EQ(s[1].layer, pattern) << pattern;
  }
  c.swa_pattern = 0;  // every layer sliding: no global layer, layer 1
  EXPECT_EQ(MakeSchedule(o, c)[0].layer, 1);
  c.swa_pattern = 6;
  o.first_check_layer = 2;
  EXPECT_EQ(MakeSchedule(o, c)[0].layer, 2);
  EXPECT_EQ(MakeSchedule(o, c.n_layers)[0].layer, 2);
  o.first_check_layer = -1;
  EXPECT_EQ(MakeSchedule(o, c.n_layers)[0].layer, 1);
}

// Exact masking: rows recomputed in the middle of the prompt (a missed chunk)
// must not see anything after them. Changing the chunk that follows must
// leave their fused K/V bit-identical in every layer; the bottom-right
// shortcut does not have this property.
TEST_F(BlenderTest, ExactMaskingNeverAttendsPastPosition) {
  const auto& c = model_->config();
  auto run = [&](uint32_t tail_seed, kernels::CausalMode mode) {
    std::mt19937 rng(11);
    Prompt p;
    p.Add(*model_, SegmentKind::kChunk, RandomTokens(&rng, 16, c.vocab_size), true);
    p.Add(*model_, SegmentKind::kChunk, RandomTokens(&rng, 16, c.vocab_size), false);  // missed
    std::mt19937 tail(tail_seed);
    p.Add(*model_, SegmentKind::kChunk, RandomTokens(&tail, 16, c.vocab_size), true);
    p.Add(*model_, SegmentKind::kQuery, RandomTokens(&tail, 4, c.vocab_size), false);
    BlendOptions o;
    o.strategy = Strategy::kFullReuse;
    o.causal = mode;
    auto r = Run(p, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return std::move(r).value();
  };
  auto a = run(100, kernels::CausalMode::kExact);
  auto b = run(200, kernels::CausalMode::kExact);
  EXPECT_EQ(KvDiff(a.cache, b.cache, 32), 0.0);
  auto ba = run(100, kernels::CausalMode::kBottomRight);
  auto bb = run(200, kernels::CausalMode::kBottomRight);
  EXPECT_GT(KvDiff(ba.cache, bb.cache, 32), 1e-3) << "bottom-right should leak the future";
}

TEST_F(BlenderTest, BlendingIsDeterministicAndOverlapMatchesSync) {
  Prompt p = MakePrompt(6, 4, 24);
  BlendOptions o;
  o.ratio = 0.2;
  o.logits = QueryLogits::kAll;
  auto a = Run(p, o);
  auto b = Run(p, o);
  o.overlap_loading = true;
  o.prefetch_layers = 1;
  auto c = Run(p, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (const BlendResult* r : {&*b, &*c}) {
    EXPECT_EQ(KvDiff(a->cache, r->cache, a->total_tokens), 0.0);
    EXPECT_EQ(a->logits, r->logits);
    EXPECT_EQ(a->recomputed, r->recomputed);
  }
  EXPECT_EQ(c->timings.layer_load_s.size(), 4u);
}

// A cache pool lends the memory of earlier fused caches (dirty, of another
// prompt, larger): the blend gives the same fused KV and logits as on fresh
// memory, and the memory is reused; the workspace the Blender keeps between
// calls changes nothing either (the second and third runs reuse it).
TEST_F(BlenderTest, APooledCacheGivesTheSameBlend) {
  Prompt p = MakePrompt(8, 3, 24), longer = MakePrompt(9, 4, 32);
  BlendOptions o;
  o.ratio = 0.3;
  o.logits = QueryLogits::kAll;
  auto fresh = Run(p, o);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  model::KVCachePool pool(size_t{1} << 30);
  o.cache_pool = &pool;
  auto other = Run(longer, o);
  ASSERT_TRUE(other.ok()) << other.status();
  pool.Release(std::move(other->cache));
  o.extra_capacity_tokens = 8;  // decode slots past the prompt: zero, not leftovers
  for (int i = 0; i < 2; ++i) {
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok()) << r.status();
    const int64_t cap = r->cache.capacity_tokens();
    ASSERT_EQ(cap, r->total_tokens + 8);
    for (int l = 0; l < r->cache.n_layers(); ++l) {
      const model::LayerKVView view = r->cache.Layer(l, cap);
      for (int64_t h = 0; h < view.k.shape[0]; ++h) {
        for (int64_t t = r->total_tokens; t < cap; ++t) {
          for (int64_t d = 0; d < view.k.shape[2]; ++d) {
            ASSERT_EQ(view.k.as<float>()[h * view.k.stride[0] + t * view.k.stride[1] + d], 0.0f);
            ASSERT_EQ(view.v.as<float>()[h * view.v.stride[0] + t * view.v.stride[1] + d], 0.0f);
          }
        }
      }
    }
    EXPECT_EQ(KvDiff(fresh->cache, r->cache, fresh->total_tokens), 0.0);
    EXPECT_EQ(fresh->logits, r->logits);
    EXPECT_EQ(fresh->recomputed, r->recomputed);
    pool.Release(std::move(r->cache));
  }
  EXPECT_EQ(pool.stats().reused, 2u);
  EXPECT_EQ(pool.stats().allocated, 1u);
}

// Concurrent blends (the sidecar's requests) share the Blender's kept
// workspaces and one cache pool: each thread's blends equal the serial blend
// of its prompt (the same recomputed rows; K/V and logits to 1e-5, which
// allows a GEMM split differently while another thread holds the cores),
// and the pool lends memory back. The CI TSan stage runs this test.
TEST_F(BlenderTest, ConcurrentBlendsShareWorkspacesAndEqualTheSerialBlend) {
  constexpr int kThreads = 4, kRounds = 3;
  BlendOptions o;
  o.ratio = 0.3;
  o.logits = QueryLogits::kAll;
  std::vector<Prompt> prompts;
  std::vector<BlendResult> serial;
  for (int i = 0; i < kThreads; ++i) {
    prompts.push_back(MakePrompt(40 + i, 3, 24 + 8 * i));
    auto r = Run(prompts.back(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    serial.push_back(*std::move(r));
  }
  model::KVCachePool pool(size_t{1} << 30);
  o.cache_pool = &pool;
  std::vector<std::vector<absl::StatusOr<BlendResult>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < kRounds; ++round) {
        got[i].push_back(Run(prompts[i], o));
        if (round + 1 < kRounds && got[i].back().ok()) pool.Release(std::move(got[i].back()->cache));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_EQ(got[i].size(), static_cast<size_t>(kRounds));
    const absl::StatusOr<BlendResult>& last = got[i].back();
    ASSERT_TRUE(last.ok()) << last.status();
    for (const auto& r : got[i]) ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(last->recomputed, serial[i].recomputed) << "thread " << i;
    EXPECT_LE(KvDiff(serial[i].cache, last->cache, serial[i].total_tokens), 1e-5) << "thread " << i;
    ASSERT_EQ(last->logits.size(), serial[i].logits.size());
    EXPECT_LE(MaxAbsDiff(last->logits.data(), serial[i].logits.data(), last->logits.size()), 1e-5)
        << "thread " << i;
  }
  EXPECT_GT(pool.stats().reused, 0u);
}

// on_layer_done: called once per layer, in order, when the layer is final:
// the copy taken in the callback equals the result's layer bit for bit, and
// the rows are the result's recomputed rows. An error aborts the blend.
TEST_F(BlenderTest, LayerCallbackSeesEachFinalLayerInOrder) {
  Prompt p = MakePrompt(7, 3, 24);
  const auto& c = model_->config();
  for (bool overlap : {false, true}) {
    BlendOptions o;
    o.ratio = 0.3;
    o.overlap_loading = overlap;
    std::vector<int> order;
    std::vector<std::vector<float>> k_copy, v_copy;
    std::vector<std::vector<int32_t>> rows_seen;
    int64_t n = 0;
    o.on_layer_done = [&](int l, const model::KVCache& cache,
                          absl::Span<const int32_t> rows) -> absl::Status {
      order.push_back(l);
      n = cache.num_tokens();
      const size_t e = static_cast<size_t>(c.n_kv_heads) * n * c.head_dim;
      k_copy.emplace_back(e);
      v_copy.emplace_back(e);
      rows_seen.emplace_back(rows.begin(), rows.end());
      return cache.ExportLayer(l, 0, n, kernels::DType::kF32, k_copy.back().data(),
                               v_copy.back().data());
    };
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(order.size(), static_cast<size_t>(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      EXPECT_EQ(order[l], l);
      const size_t e = k_copy[l].size();
      std::vector<float> k(e), v(e);
      ASSERT_TRUE(r->cache.ExportLayer(l, 0, n, kernels::DType::kF32, k.data(), v.data()).ok());
      EXPECT_EQ(k, k_copy[l]) << "layer " << l << " changed after its callback";
      EXPECT_EQ(v, v_copy[l]) << "layer " << l;
      EXPECT_EQ(rows_seen[l], r->recomputed[l]);
    }
  }
  BlendOptions o;
  o.ratio = 0.3;
  int calls = 0;
  o.on_layer_done = [&](int l, const model::KVCache&, absl::Span<const int32_t>) {
    ++calls;
    return l == 1 ? absl::CancelledError("client went away") : absl::OkStatus();
  };
  auto r = Run(p, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

TEST_F(BlenderTest, MoreRecomputeIsCloserToPrefill) {
  Prompt p = MakePrompt(7, 4, 32);
  Reference ref = FullPrefill(p.AllTokens());
  const int V = model_->config().vocab_size;
  double prev = std::numeric_limits<double>::infinity();
  for (double ratio : {0.0, 0.5, 1.0}) {
    BlendOptions o;
    o.ratio = ratio;
    o.logits = QueryLogits::kAll;
    auto r = Run(p, o);
    ASSERT_TRUE(r.ok());
    const double d = MaxAbsDiff(r->logits.data(), ref.logits.data() + r->query_begin * V, 6 * V);
    EXPECT_LE(d, prev + 1e-6) << ratio;
    prev = d;
  }
  EXPECT_LT(prev, 1e-4);
}

TEST_F(BlenderTest, HalfPrecisionCache) {
  auto m16 = SmallModel(DType::kF16);
  auto blender = Blender::Create({m16.get()});
  ASSERT_TRUE(blender.ok());
  std::mt19937 rng(9);
  Prompt p;
  p.Add(*m16, SegmentKind::kChunk, RandomTokens(&rng, 20, 300), true);
  p.Add(*m16, SegmentKind::kChunk, RandomTokens(&rng, 20, 300), true);
  p.Add(*m16, SegmentKind::kQuery, RandomTokens(&rng, 4, 300), false);
  EXPECT_EQ(p.kv[0]->info.dtype, DType::kF16);
  BlendOptions o;
  o.ratio = 1.0;
  auto segs = p.Segments();
  auto r = (*blender)->Blend(segs, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto ref_cache = m16->NewCache(44);
  std::vector<float> logits(300);
  model::Workspace ws;
  ASSERT_TRUE(
      m16->Prefill(p.AllTokens(), &*ref_cache, &ws, model::LogitsMode::kLast, logits.data()).ok());
  EXPECT_LT(MaxAbsDiff(r->logits.data(), logits.data(), 300), 2e-2);
}

TEST_F(BlenderTest, BadInputIsRejected) {
  Prompt p = MakePrompt(8);
  auto segs = p.Segments();
  BlendOptions o;
  // Ratio outside [0, 1].
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    o.ratio = bad;
    EXPECT_EQ(blender_->Blend(segs, o).status().code(), absl::StatusCode::kInvalidArgument);
  }
  o.ratio = 0.15;
  // Empty chunk list.
  std::vector<BlendSegment> no_chunks = {segs.front(), segs.back()};
  EXPECT_EQ(blender_->Blend(no_chunks, o).status().code(), absl::StatusCode::kInvalidArgument);
  // Query not last.
  std::vector<BlendSegment> bad_order = {segs[0], segs.back(), segs[1]};
  EXPECT_EQ(blender_->Blend(bad_order, o).status().code(), absl::StatusCode::kInvalidArgument);
  // Empty segment.
  std::vector<BlendSegment> empty = segs;
  empty[1].tokens = {};
  EXPECT_EQ(blender_->Blend(empty, o).status().code(), absl::StatusCode::kInvalidArgument);
  // Fingerprint of another model.
  {
    ChunkKV other = *p.kv[1];
    other.info.fingerprint[0] ^= 1;
    InMemoryKvSource src(&other);
    std::vector<BlendSegment> s = segs;
    s[1].kv = &src;
    EXPECT_EQ(blender_->Blend(s, o).status().code(), absl::StatusCode::kFailedPrecondition);
  }
  // Head layout / dtype / token count disagree.
  for (int what = 0; what < 3; ++what) {
    ChunkKV other = *p.kv[1];
    if (what == 0) other.info.kv_heads = 4;
    if (what == 1) other.info.dtype = DType::kF16;
    if (what == 2) other.info.num_tokens += 1;
    InMemoryKvSource src(&other);
    std::vector<BlendSegment> s = segs;
    s[1].kv = &src;
    EXPECT_EQ(blender_->Blend(s, o).status().code(), absl::StatusCode::kInvalidArgument) << what;
  }
  // Over the context (512).
  std::vector<int32_t> big(600, 5);
  std::vector<BlendSegment> s = {{SegmentKind::kChunk, big, nullptr}, segs.back()};
  EXPECT_EQ(blender_->Blend(s, o).status().code(), absl::StatusCode::kOutOfRange);
  // Bad schedule.
  o.schedule = {{2, 0.3}, {1, 0.15}};
  EXPECT_EQ(blender_->Blend(segs, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.schedule = {{1, 1.3}};
  EXPECT_EQ(blender_->Blend(segs, o).status().code(), absl::StatusCode::kInvalidArgument);
  // A source that fails mid-way fails the whole blend, and the error says
  // which segment failed at which layer (FailedLoadOf), except a Cancelled
  // one (the caller went away: nothing to recompute).
  class FailingSource : public KvSource {
   public:
    FailingSource(ChunkInfo info, absl::Status error) : info_(info), error_(std::move(error)) {}
    const ChunkInfo& info() const override { return info_; }
    absl::Status ReadLayer(int layer, kernels::TensorView, kernels::TensorView) override {
      return layer >= 2 ? error_ : absl::OkStatus();
    }
   private:
    ChunkInfo info_;
    absl::Status error_;
  };
  FailingSource fail(p.kv[1]->info, absl::DataLossError("layer record corrupt"));
  std::vector<BlendSegment> f = segs;
  f[1].kv = &fail;
  o.schedule.clear();
  for (bool overlap : {false, true}) {
    o.overlap_loading = overlap;
    const absl::Status st = blender_->Blend(f, o).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    const std::optional<FailedLoad> fl = FailedLoadOf(st);
    ASSERT_TRUE(fl.has_value()) << st;
    EXPECT_EQ(fl->segment, 1);
    EXPECT_EQ(fl->layer, 2);
  }
  FailingSource gone(p.kv[1]->info, absl::CancelledError("consumer gone"));
  f[1].kv = &gone;
  const absl::Status st = blender_->Blend(f, o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(FailedLoadOf(st).has_value());
  EXPECT_FALSE(FailedLoadOf(absl::DataLossError("no payload")).has_value());
}

}  // namespace
}  // namespace ragkv::blend

namespace ragkv::blend {
namespace {

// A chunk precomputed after the system prefix and placed right after it is
// exact: full reuse then equals full prefill.
TEST(PrecomputeChunkAfter, ChunkAfterItsContextIsExact) {
  auto m = testing::SmallModel();
  std::mt19937 rng(12);
  const auto prefix = testing::RandomTokens(&rng, 5, 300);
  const auto chunk = testing::RandomTokens(&rng, 20, 300);
  const auto query = testing::RandomTokens(&rng, 3, 300);
  auto pk = PrecomputeChunk(*m, prefix);
  auto ck = PrecomputeChunkAfter(*m, prefix, chunk, kernels::DType::kF32);
  ASSERT_TRUE(pk.ok() && ck.ok()) << ck.status();
  EXPECT_EQ(ck->info.num_tokens, 20);
  InMemoryKvSource ps(&*pk), cs(&*ck);
  std::vector<BlendSegment> segs = {{SegmentKind::kPrefix, prefix, &ps},
                                    {SegmentKind::kChunk, chunk, &cs},
                                    {SegmentKind::kQuery, query, nullptr}};
  auto b = Blender::Create({m.get()});
  BlendOptions o;
  o.strategy = Strategy::kFullReuse;
  auto r = (*b)->Blend(segs, o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int32_t> all = prefix;
  all.insert(all.end(), chunk.begin(), chunk.end());
  all.insert(all.end(), query.begin(), query.end());
  auto ref = m->NewCache(28);
  std::vector<float> logits(300);
  model::Workspace ws;
  ASSERT_TRUE(m->Prefill(all, &*ref, &ws, model::LogitsMode::kLast, logits.data()).ok());
  EXPECT_LT(MaxAbsDiff(r->logits.data(), logits.data(), 300), 1e-4);
  const auto& c = m->config();
  for (int l = 0; l < c.n_layers; ++l) {
    auto a = r->cache.Layer(l, 28), e = ref->Layer(l, 28);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      EXPECT_LT(MaxAbsDiff(a.k.as<float>() + h * a.k.stride[0], e.k.as<float>() + h * e.k.stride[0],
                           28 * c.head_dim),
                1e-4);
    }
  }
}

}  // namespace
}  // namespace ragkv::blend
