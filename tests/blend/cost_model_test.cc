#include "blend/cost_model.h"

#include <gtest/gtest.h>

namespace ragkv::blend {
namespace {

// A tiny shape whose FLOPs and bytes are computed by hand below.
ModelShape Tiny() {
  ModelShape s;
  s.name = "tiny";
  s.layers = 2;
  s.dim = 8;
  s.heads = 2;
  s.kv_heads = 1;
  s.head_dim = 4;
  s.ffn = 16;
  s.vocab = 10;
  s.weight_bytes_per_elem = 4;
  s.kv_bytes_per_elem = 2;
  return s;
}

HardwareSpec UnitHw() {
  HardwareSpec h;
  h.name = "unit";
  h.peak_flops = 1000;
  h.mem_bw = 1000;
  h.ram_tier_bw = 100;
  h.ssd_tier_bw = 10;
  h.remote_tier_bw = 20;
  return h;
}

TEST(CostModel, PrefillLayerByHand) {
  CostModel m(Tiny(), UnitHw());
  // Linear weights per layer: q 8*8 + k,v 2*8*4 + o 8*8 + mlp 3*8*16 = 576.
  // 3 tokens, no cache: visible keys 1+2+3 = 6; attention 4*heads*hd*6 = 192.
  StageCost c = m.PrefillLayer(3, 0);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 3 * 576 + 192);
  // bytes: weights 576*4 + KV 2*1*4*3*2 + activations 3*(4*8+2*16)*4.
  EXPECT_DOUBLE_EQ(c.bytes, 2304 + 48 + 768);
  EXPECT_DOUBLE_EQ(m.ComputeSeconds(c), 3.648);  // compute-bound: 3648 flops / 1000
  double ratio = 0;
  EXPECT_TRUE(m.ComputeBound(c, &ratio));
  EXPECT_NEAR(ratio, 3648.0 / 3120.0, 1e-12);
}

TEST(CostModel, PrefillWithCacheCountsVisibleKeys) {
  CostModel m(Tiny(), UnitHw());
  // 2 new tokens after 5 cached: rows see 6 and 7 keys = 13.
  StageCost c = m.PrefillLayer(2, 5);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 2 * 576 + 4.0 * 2 * 4 * 13);
}

TEST(CostModel, KvBytesAndLoad) {
  CostModel m(Tiny(), UnitHw());
  EXPECT_DOUBLE_EQ(m.KvBytesPerLayer(10), 160);  // 2 (K,V) * 1 head * 4 dims * 10 tok * 2 B
  EXPECT_DOUBLE_EQ(m.LoadSeconds(10, Tier::kRam), 1.6);
  EXPECT_DOUBLE_EQ(m.LoadSeconds(10, Tier::kSsd), 16);
  EXPECT_DOUBLE_EQ(m.LmHead(1).flops, 160);
}

TEST(CostModel, BlendAtFullRatioCostsAtLeastPrefill) {
  CostModel m(Tiny(), UnitHw());
  const double full = m.FullPrefillSeconds(100, 4);
  EXPECT_GT(m.BlendSeconds(100, 4, 1.0, Tier::kRam), full * 0.99);
  EXPECT_LT(m.BlendSeconds(100, 4, 0.0, Tier::kRam), m.BlendSeconds(100, 4, 0.15, Tier::kRam));
}

TEST(CostModel, MaxHiddenRatioHidesRecompute) {
  ModelShape s = Tiny();
  HardwareSpec h = UnitHw();
  h.peak_flops = 1e6;
  h.mem_bw = 1e6;
  h.ssd_tier_bw = 1e4;  // ~0.8 s per layer: between recompute at r=0 and r=1
  CostModel m(s, h);
  const double r = m.MaxHiddenRatio(512, 8, Tier::kSsd);
  ASSERT_GT(r, 0);
  ASSERT_LT(r, 1);
  const double load = m.LoadSeconds(512, Tier::kSsd);
  EXPECT_LE(m.RecomputeSecondsPerLayer(512, 8, r), load * (1 + 1e-9));
  EXPECT_GT(m.RecomputeSecondsPerLayer(512, 8, std::min(1.0, r + 0.01)), load);
}

TEST(Controller, PicksCheapestTierThatHides) {
  HardwareSpec h = UnitHw();
  h.peak_flops = 1e3;  // slow compute: every tier's load hides under recompute
  h.mem_bw = 1e9;
  h.ram_tier_bw = 1e9;
  h.ssd_tier_bw = 1e8;
  h.remote_tier_bw = 5e8;
  CostModel m(Tiny(), h);
  Decision d = ChooseRatioAndTier(m, 512, 8, 0.15, 0.5, {Tier::kRam, Tier::kSsd, Tier::kRemote});
  EXPECT_EQ(d.tier, Tier::kSsd);
  EXPECT_DOUBLE_EQ(d.ratio, 0.15);
  EXPECT_LE(d.load_s_per_layer, d.recompute_s_per_layer);
  EXPECT_FALSE(d.why.empty());
}

TEST(Controller, RaisesRatioWhenLoadingDominates) {
  HardwareSpec h = UnitHw();
  h.peak_flops = 1e9;  // fast compute, slow storage
  h.mem_bw = 1e9;
  h.ram_tier_bw = 1e5;
  h.ssd_tier_bw = 1e4;
  h.remote_tier_bw = 2e4;
  CostModel m(Tiny(), h);
  Decision d = ChooseRatioAndTier(m, 512, 8, 0.15, 0.6, {Tier::kSsd, Tier::kRam});
  EXPECT_EQ(d.tier, Tier::kRam);  // fastest
  EXPECT_GT(d.ratio, 0.15);
  EXPECT_LE(d.ratio, 0.6);
}

TEST(Presets, PaperSetupOrderOfMagnitude) {
  // CacheBlend paper: Llama-7B, 4K context, A40, NVMe 4.8 GB/s: recompute at
  // 15% ~3 ms/layer vs load ~16 ms/layer.
  auto shape = ModelPreset("llama-7b");
  auto hw = HardwarePreset("a40");
  ASSERT_TRUE(shape.ok());
  ASSERT_TRUE(hw.ok());
  CostModel m(*shape, *hw);
  const double load_ms = m.LoadSeconds(4096, Tier::kSsd) * 1e3;
  const double rec_ms = m.RecomputeSecondsPerLayer(4096, 0, 0.15) * 1e3;
  EXPECT_GT(load_ms, 16.0 / 3);
  EXPECT_LT(load_ms, 16.0 * 3);
  EXPECT_GT(rec_ms, 3.0 / 3);
  EXPECT_LT(rec_ms, 3.0 * 3);
  EXPECT_FALSE(ModelPreset("nope").ok());
  EXPECT_FALSE(HardwarePreset("nope").ok());
}

}  // namespace
}  // namespace ragkv::blend

#include <sstream>

#include "blend/planner.h"

namespace ragkv::blend {
namespace {

TEST(Planner, RowsForEveryStrategyAndTier) {
  auto shape = ModelPreset("llama-3-8b");
  auto hw = HardwarePreset("h100-sxm");
  ASSERT_TRUE(shape.ok() && hw.ok());
  PlanWorkload w;
  Plan p = MakePlan(*shape, *hw, w);
  // full prefill + 3 tiers x (prefix + reuse + 5 ratios) + controller.
  EXPECT_EQ(p.rows.size(), 1u + 3 * (2 + w.ratios.size()) + 1);
  EXPECT_DOUBLE_EQ(p.rows[0].speedup, 1.0);
  // Llama-3-8B: 32 layers x 2 x 8 kv heads x 128 x 2 B = 128 KiB per token.
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_token, 131072);
  for (const auto& r : p.rows) EXPECT_GT(r.ttft_s, 0) << r.strategy;
  std::ostringstream table, json;
  PrintPlanTable(p, table);
  PrintPlanJson(p, json);
  EXPECT_NE(table.str().find("controller"), std::string::npos);
  EXPECT_EQ(json.str().front(), '{');
}

}  // namespace
}  // namespace ragkv::blend
