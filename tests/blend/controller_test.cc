#include "blend/loading_controller.h"

#include <random>

#include <gtest/gtest.h>

#include "blend/store_source.h"
#include "blend_test_util.h"
#include "kvstore/ram_tier.h"
#include "kvstore/tiered_store.h"

namespace ragkv::blend {
namespace {

using testing::Prompt;
using testing::RandomTokens;
using testing::SmallModel;

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = SmallModel(); }
  ControllerOptions Injected(double flops, double ram, double ssd, double remote) {
    ControllerOptions o;
    o.model = model_.get();
    o.recompute_flops_per_s = flops;
    o.tier_bytes_per_s[static_cast<int>(Tier::kRam)] = ram;
    o.tier_bytes_per_s[static_cast<int>(Tier::kSsd)] = ssd;
    o.tier_bytes_per_s[static_cast<int>(Tier::kRemote)] = remote;
    return o;
  }
  std::unique_ptr<model::Model> model_;
};

constexpr std::initializer_list<Tier> kAll = {Tier::kRam, Tier::kSsd, Tier::kRemote};

TEST_F(ControllerTest, DecisionFollowsItsCostModel) {
  // 1 GFLOP/s recompute; per-layer KV of 400 f32 tokens is 400*2*2*16*4 =
  // 102400 bytes.
  auto c = LoadingController::Create(Injected(1e9, 1e10, 1e6, 1e7));
  ASSERT_TRUE(c.ok()) << c.status();
  const CostModel cm = (*c)->CostModelSnapshot();
  EXPECT_DOUBLE_EQ(cm.KvBytesPerLayer(400), 102400);
  EXPECT_DOUBLE_EQ(cm.hardware().peak_flops, 1e9);
  for (std::vector<Tier> avail :
       {std::vector<Tier>(kAll), {Tier::kRam}, {Tier::kSsd, Tier::kRam}, {Tier::kRemote}}) {
    const Decision d = (*c)->Decide(400, 16, avail);
    const Decision want = ChooseRatioAndTier(cm, 400, 16, 0.15, 0.5, avail);
    EXPECT_EQ(d.tier, want.tier);
    EXPECT_DOUBLE_EQ(d.ratio, want.ratio);
    EXPECT_FALSE(d.why.empty());
  }
}

TEST_F(ControllerTest, PicksCheapestTierThatHidesAndRaisesRatioWhenLoadBound) {
  // Recompute at r_min per layer, under this calibration:
  auto probe = LoadingController::Create(Injected(1e9, 1, 1, 1));
  ASSERT_TRUE(probe.ok());
  const double rec = (*probe)->CostModelSnapshot().RecomputeSecondsPerLayer(400, 16, 0.15);
  const double bytes = 102400;
  // SSD loads a layer in half the recompute time: hides -> SSD (cheapest), r_min.
  auto c = LoadingController::Create(Injected(1e9, bytes / rec * 100, bytes / rec * 2,
                                              bytes / rec * 4));
  ASSERT_TRUE(c.ok());
  Decision d = (*c)->Decide(400, 16, kAll);
  EXPECT_EQ(d.tier, Tier::kSsd);
  EXPECT_DOUBLE_EQ(d.ratio, 0.15);
  // SSD too slow now (4x recompute), remote hides: remote.
  for (int i = 0; i < 3; ++i) (*c)->ObserveTierBandwidth(Tier::kSsd, 1);  // EWMA: 2x -> 0.69x
  d = (*c)->Decide(400, 16, kAll);
  EXPECT_EQ(d.tier, Tier::kRemote);
  // Every tier slower than recompute: fastest tier, ratio raised so that
  // recompute still hides under loading, within [r_min, r_max].
  auto slow = LoadingController::Create(Injected(1e9, bytes / rec / 3, bytes / rec / 10,
                                                 bytes / rec / 5));
  ASSERT_TRUE(slow.ok());
  d = (*slow)->Decide(400, 16, kAll);
  EXPECT_EQ(d.tier, Tier::kRam);
  EXPECT_GT(d.ratio, 0.15);
  EXPECT_LE(d.ratio, 0.5);
  EXPECT_LE(d.recompute_s_per_layer, d.load_s_per_layer * (1 + 1e-9));
  // Unknown bandwidth: never chosen over a known one.
  auto partial = LoadingController::Create(Injected(1e9, 0, bytes / rec * 2, 0));
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ((*partial)->Decide(400, 16, kAll).tier, Tier::kSsd);
  auto none = LoadingController::Create(Injected(1e9, 0, 0, 0));
  ASSERT_TRUE(none.ok());
  d = (*none)->Decide(400, 16, {Tier::kRam});
  EXPECT_DOUBLE_EQ(d.ratio, 0.15);
  EXPECT_NE(d.why.find("no loading bandwidth"), std::string::npos);
}

// The default selector's look-ahead waits for the layers it reads: from a
// tier whose loads hide it the controller keeps it (every layer, or the
// configured horizon); once its wait would show (more than 5% of the
// predicted TTFT) it blends with attended-deviation and says why, never
// with a narrower horizon; a template naming another selector is left alone.
TEST_F(ControllerTest, KeepsTheLookaheadThenDropsItAsItsWaitWouldShow) {
  auto probe = LoadingController::Create(Injected(1e9, 1, 1, 1));
  ASSERT_TRUE(probe.ok());
  const double rec = (*probe)->CostModelSnapshot().RecomputeSecondsPerLayer(400, 16, 0.15);
  const double bytes = 102400;
  auto fast = LoadingController::Create(Injected(1e9, bytes / rec * 1000, 0, 0));
  ASSERT_TRUE(fast.ok());
  Decision d = (*fast)->Decide(400, 16, {Tier::kRam});
  EXPECT_TRUE(d.lookahead) << d.why;
  EXPECT_EQ(d.lookahead_layers, 0);
  EXPECT_EQ(d.why.find("attended-deviation"), std::string::npos) << d.why;
  // Slower and slower SSDs, with every layer and with a configured horizon:
  // the look-ahead is kept exactly while its own wait fits.
  for (int configured : {0, 2}) {
    int kept = 0, dropped = 0;
    for (double f = 100; f > 0.01; f /= 1.5) {
      ControllerOptions o = Injected(1e9, 0, bytes / rec * f, 0);
      o.blend.lookahead_layers = configured;
      auto c = LoadingController::Create(o);
      ASSERT_TRUE(c.ok());
      d = (*c)->Decide(400, 16, {Tier::kSsd});
      const CostModel cm = (*c)->CostModelSnapshot();
      const bool fits =
          LookaheadWait(cm, 400, 16, d.ratio, Tier::kSsd, configured) <= 0.05 * d.predicted_ttft_s;
      EXPECT_EQ(d.lookahead, fits) << "f " << f << ": " << d.why;
      if (d.lookahead) {
        ++kept;
        EXPECT_EQ(d.lookahead_layers, configured) << "f " << f;
      } else {
        ++dropped;
        EXPECT_NE(d.why.find("attended-deviation: the look-ahead would wait"), std::string::npos)
            << d.why;
      }
    }
    EXPECT_GT(kept, 0) << configured;
    EXPECT_GT(dropped, 0) << configured;
  }
  const CostModel cm = (*fast)->CostModelSnapshot();
  EXPECT_DOUBLE_EQ(LookaheadWait(cm, 400, 16, 0, Tier::kSsd), 0);  // full reuse: none
  ControllerOptions named = Injected(1e9, 0, bytes / rec / 10, 0);
  named.blend.selector = Selector::kAttendedDeviation;
  auto other = LoadingController::Create(named);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->Decide(400, 16, {Tier::kSsd}).lookahead);
}

TEST_F(ControllerTest, RejectsBadOptions) {
  ControllerOptions o = Injected(1e9, 1, 1, 1);
  o.r_min = 0.6;
  o.r_max = 0.5;
  EXPECT_EQ(LoadingController::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.r_min = -1;
  EXPECT_EQ(LoadingController::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Injected(1e9, 1, 1, 1);
  o.model = nullptr;
  EXPECT_EQ(LoadingController::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ControllerTest, MeasuresAndBlendsWithItsDecision) {
  ControllerOptions o = Injected(0, 1e12, 0, 0);  // flops measured at Create
  o.calibration_rows = 16;
  o.calibration_kv_tokens = 128;
  auto c = LoadingController::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT((*c)->recompute_flops_per_s(), 1e6);
  std::mt19937 rng(3);
  Prompt p;
  for (int i = 0; i < 3; ++i) p.Add(*model_, SegmentKind::kChunk, RandomTokens(&rng, 32, 300), true);
  p.Add(*model_, SegmentKind::kQuery, RandomTokens(&rng, 4, 300), false);
  auto segs = p.Segments();
  auto r = (*c)->Blend(segs, {Tier::kRam});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decision.tier, Tier::kRam);
  // Same as the Blender run synchronously at the decided ratio.
  auto b = Blender::Create({model_.get()});
  BlendOptions bo;
  bo.ratio = r->decision.ratio;
  auto ref = (*b)->Blend(segs, bo);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->logits, r->result.logits);
  EXPECT_EQ(ref->recomputed, r->result.recomputed);
}

// The store path: chunks put into a TieredStore (RAM tier), streamed layer by
// layer through StoreKvSource, blend bit-identical to the in-memory path.
TEST_F(ControllerTest, StoreSourceStreamsLayers) {
  auto tier = kvstore::CreateRamTier({});
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<std::shared_ptr<kvstore::Tier>> tiers;
  tiers.push_back(std::move(tier).value());
  auto store = kvstore::TieredStore::Create({}, tiers);
  ASSERT_TRUE(store.ok()) << store.status();
  std::mt19937 rng(4);
  Prompt p;
  for (int i = 0; i < 3; ++i) p.Add(*model_, SegmentKind::kChunk, RandomTokens(&rng, 24, 300), true);
  p.Add(*model_, SegmentKind::kQuery, RandomTokens(&rng, 4, 300), false);
  std::vector<std::unique_ptr<StoreKvSource>> sources;
  for (int i = 0; i < 3; ++i) {
    auto enc = EncodeForStore(*p.kv[i]);
    ASSERT_TRUE(enc.ok()) << enc.status();
    ASSERT_TRUE((*store)->Put(enc->key, enc->chunk).ok());
    auto src = StoreKvSource::Open(store->get(), enc->key, model_->fingerprint(),
                                   /*max_buffered_layers=*/1);
    ASSERT_TRUE(src.ok()) << src.status();
    ASSERT_NE(*src, nullptr);
    EXPECT_EQ((*src)->info().num_tokens, 24);
    sources.push_back(std::move(src).value());
  }
  auto segs = p.Segments();
  auto b = Blender::Create({model_.get()});
  BlendOptions o;
  o.ratio = 0.3;
  o.logits = QueryLogits::kAll;
  auto ref = (*b)->Blend(segs, o);
  ASSERT_TRUE(ref.ok());
  for (int i = 0; i < 3; ++i) segs[i].kv = sources[i].get();
  o.overlap_loading = true;
  auto got = (*b)->Blend(segs, o);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(ref->logits, got->logits);
  EXPECT_GT(sources[0]->bytes_read(), 0u);
  // A key nobody stored is a miss (nullptr), not an error.
  auto miss = StoreKvSource::Open(store->get(), kvstore::ChunkKey::Of(model_->fingerprint(), {1}),
                                  model_->fingerprint());
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(*miss, nullptr);
  // Int8 codec: decoded path, close to f32.
  auto enc8 = EncodeForStore(*p.kv[1], kvstore::Codec::kInt8PerChannel);
  ASSERT_TRUE(enc8.ok()) << enc8.status();
  auto tier2 = kvstore::CreateRamTier({});
  std::vector<std::shared_ptr<kvstore::Tier>> t2;
  t2.push_back(std::move(tier2).value());
  auto store2 = kvstore::TieredStore::Create({}, t2);
  ASSERT_TRUE((*store2)->Put(enc8->key, enc8->chunk).ok());
  auto src8 = StoreKvSource::Open(store2->get(), enc8->key, model_->fingerprint());
  ASSERT_TRUE(src8.ok() && *src8 != nullptr);
  segs = p.Segments();
  segs[1].kv = src8->get();
  o.overlap_loading = false;
  auto q8 = (*b)->Blend(segs, o);
  ASSERT_TRUE(q8.ok()) << q8.status();
  EXPECT_LT(testing::MaxAbsDiff(q8->logits.data(), ref->logits.data(),
                                static_cast<int64_t>(ref->logits.size())),
            0.5);
}

// The serving tier is known as soon as Open returns a source (the loading
// controller reads it before any layer is consumed), for a chunk that only
// the second tier holds, with room for one layer only: the stream cannot
// have finished.
TEST_F(ControllerTest, StoreSourceNamesItsTierBeforeTheLayersAreRead) {
  std::vector<std::shared_ptr<kvstore::Tier>> tiers;
  for (int i = 0; i < 2; ++i) tiers.push_back(kvstore::CreateRamTier({}).value());
  kvstore::TieredStoreOptions so;
  so.promote_on_hit = false;
  auto store = kvstore::TieredStore::Create(so, tiers);
  ASSERT_TRUE(store.ok()) << store.status();
  std::mt19937 rng(5);
  Prompt p;
  p.Add(*model_, SegmentKind::kChunk, RandomTokens(&rng, 24, 300), true);
  auto enc = EncodeForStore(*p.kv[0]);
  ASSERT_TRUE(enc.ok()) << enc.status();
  ASSERT_TRUE(tiers[1]->Put(enc->key, enc->chunk).ok());
  auto src = StoreKvSource::Open(store->get(), enc->key, model_->fingerprint(),
                                 /*max_buffered_layers=*/1);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_NE(*src, nullptr);
  ASSERT_GT(model_->config().n_layers, 2);
  EXPECT_FALSE((*src)->finished());
  EXPECT_EQ((*src)->tier_index(), 1u);
}

}  // namespace
}  // namespace ragkv::blend
