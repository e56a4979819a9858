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

TEST(CostModel, GemmRateInterpolatesInLogRows) {
  HardwareSpec hw = UnitHw();
  hw.gemm_flops_at_rows = {{1, 100}, {100, 1100}};
  CostModel m(Tiny(), hw);
  EXPECT_DOUBLE_EQ(m.GemmFlops(0.5), 100);   // clamped below
  EXPECT_DOUBLE_EQ(m.GemmFlops(1000), 1100); // clamped above
  EXPECT_NEAR(m.GemmFlops(10), 600, 1e-9);   // log10(10) / log10(100) = 1/2
  hw.gemm_flops_at_rows.clear();
  EXPECT_DOUBLE_EQ(CostModel(Tiny(), hw).GemmFlops(10), 1000);  // the peak
}

TEST(CostModel, MeasuredRatesSplitTheComputeTime) {
  HardwareSpec hw = UnitHw();
  hw.mem_bw = 0;
  hw.gemm_flops_at_rows = {{3, 500}};
  hw.attention_flops = 48;
  hw.row_op_bytes_per_s = 1e4;
  CostModel m(Tiny(), hw);
  // RowOpBytes for Tiny: 4 * (4*8 + 2*(8+4) + 3*16 + 4*4) = 480 per row.
  EXPECT_DOUBLE_EQ(m.RowOpBytes(), 480);
  const StageCost c = m.PrefillLayer(3, 0);
  EXPECT_DOUBLE_EQ(c.attn_flops, 192);
  EXPECT_DOUBLE_EQ(c.row_bytes, 1440);
  // GEMM 3456 / 500 + attention 192 / 48 + rows 1440 / 1e4.
  EXPECT_DOUBLE_EQ(m.ComputeSeconds(c), 3456.0 / 500 + 4 + 0.144);
}

TEST(CostModel, RowsWithCachedKvProjectOnlyQ) {
  CostModel m(Tiny(), UnitHw());
  // Tiny: W = q 8x8 + k,v 2 x 8x4 + o 8x8 + MLP 3 x 8x16 = 576 weights, of
  // which k,v = 64. 3 rows, 1 of them projecting K/V: 2*3*512 + 2*1*64.
  const StageCost all = m.SelectiveLayer(3, 10, 6);
  const StageCost one = m.SelectiveLayer(3, 10, 6, 1);
  EXPECT_DOUBLE_EQ(all.flops - all.attn_flops, 2.0 * 3 * 576);
  EXPECT_DOUBLE_EQ(one.flops - one.attn_flops, 2.0 * 3 * 512 + 2.0 * 1 * 64);
  EXPECT_DOUBLE_EQ(one.attn_flops, all.attn_flops);
  // kv_rows >= rows is every row.
  EXPECT_DOUBLE_EQ(m.SelectiveLayer(3, 10, 6, 3).flops, all.flops);
}

TEST(CostModel, PredictionsReduceToTheRooflineWithoutRates) {
  CostModel m(Tiny(), UnitHw());
  RequestShape r;
  r.context_tokens = 100;
  r.query_tokens = 4;
  EXPECT_DOUBLE_EQ(m.PredictFullPrefill(r).total_s, m.FullPrefillSeconds(100, 4));
  // No exact prefix, no re-rotation / alloc rates: full reuse is the
  // roofline's BlendSeconds at r = 0.
  EXPECT_NEAR(m.PredictBlend(r, 0, Tier::kSsd).total_s, m.BlendSeconds(100, 4, 0, Tier::kSsd),
              1e-9);
}

TEST(CostModel, PredictBlendFollowsTheGradualSchedule) {
  HardwareSpec hw = UnitHw();
  hw.ram_tier_bw = 1e12;  // loading free
  ModelShape s = Tiny();
  s.layers = 4;
  CostModel m4(s, hw);
  RequestShape r;
  r.context_tokens = 100;
  r.query_tokens = 4;
  r.exact_prefix_tokens = 20;  // 80 selectable rows
  const RequestPrediction p = m4.PredictBlend(r, 0.25, Tier::kRam);
  // Layer 0: rows 20..103 (84 rows) see p + 1 keys: (104*105 - 20*21) / 2 = 5250.
  // The 80 selectable rows take layer 0's K/V from the cache: only the 4
  // query rows project K/V (reuse_exact_kv).
  EXPECT_DOUBLE_EQ(p.layer0_s, m4.ComputeSeconds(m4.SelectiveLayer(84, 104, 5250, 4)));
  // The default schedule on 4 layers: checks at 1, 2, 3 (the 4th step is
  // past the last layer), ratios 0.5, 0.5 * 0.5^(1/3), then r = 0.25: layer
  // 1 keeps round(0.5 * 80) = 40, layer 2 round(0.3969 * 80) = 32, layer 3
  // round(0.25 * 80) = 20; selected rows see (20 + 100 + 1) / 2 keys on
  // average, query rows 101..104. At the check layers the kept rows' K/V
  // come from the probe (4 K/V rows).
  const double q = 101 + 102 + 103 + 104;
  const double l1 = m4.ComputeSeconds(m4.SelectiveLayer(44, 104, 40 * 60.5 + q, 4));
  const double l2 = m4.ComputeSeconds(m4.SelectiveLayer(36, 104, 32 * 60.5 + q, 4));
  const double l3 = m4.ComputeSeconds(m4.SelectiveLayer(24, 104, 20 * 60.5 + q, 4));
  EXPECT_NEAR(p.recompute_s, l1 + l2 + l3, 1e-9);
  // Probes: 80, 40 then 32 candidates through the k/v projection,
  // 2 * n * dim * 2 kv_dim = 2 * n * 8 * 8.
  EXPECT_NEAR(p.selection_s, (2.0 * 80 + 2.0 * 40 + 2.0 * 32) * 8 * 8 / 1000, 1e-9);
  EXPECT_GT(p.total_s, p.layer0_s + p.recompute_s + p.selection_s);
  // Full reuse computes only the query rows in every layer.
  const RequestPrediction reuse = m4.PredictBlend(r, 0, Tier::kRam);
  EXPECT_DOUBLE_EQ(reuse.selection_s, 0);
  EXPECT_DOUBLE_EQ(reuse.layer0_s, m4.ComputeSeconds(m4.SelectiveLayer(4, 104, q)));
}

// Query100: 100 context tokens and a 4-token query, with or without the
// query look-ahead.
RequestShape Query100(bool lookahead) {
  RequestShape r;
  r.context_tokens = 100;
  r.query_tokens = 4;
  r.query_lookahead = lookahead;
  return r;
}

// The query look-ahead (lookahead-deviation): its compute is counted in
// selection_s; with loading free it adds exactly that; load-bound, the
// first check waits for every layer, so nothing after it hides a load.
TEST(CostModel, PredictBlendCountsTheQueryLookaheadAndItsWaitForEveryLayer) {
  ModelShape s = Tiny();
  s.layers = 6;
  HardwareSpec fast = UnitHw();
  fast.ram_tier_bw = 1e12;
  const RequestShape r = Query100(false), la = Query100(true);
  const CostModel free_load(s, fast);
  const RequestPrediction a = free_load.PredictBlend(r, 0.2, Tier::kRam);
  const RequestPrediction b = free_load.PredictBlend(la, 0.2, Tier::kRam);
  EXPECT_GT(b.selection_s, a.selection_s);
  EXPECT_NEAR(b.total_s - a.total_s, b.selection_s - a.selection_s, 1e-6 * b.total_s);
  // Full reuse selects nothing: no look-ahead.
  EXPECT_DOUBLE_EQ(free_load.PredictBlend(la, 0, Tier::kRam).total_s,
                   free_load.PredictBlend(r, 0, Tier::kRam).total_s);
  // Load-bound (1e4 s a layer from SSD): the first check (layer 1) waits for
  // all 6 layers, then every compute from it on is exposed.
  HardwareSpec slow = UnitHw();
  slow.ssd_tier_bw = free_load.KvBytesPerLayer(100) / 1e4;
  const CostModel bound(s, slow);
  const RequestPrediction c = bound.PredictBlend(la, 0.2, Tier::kSsd);
  const RequestPrediction d = bound.PredictBlend(r, 0.2, Tier::kSsd);
  EXPECT_NEAR(c.load_s, 6e4, 1e-6);
  ASSERT_LT(c.layer0_s, 6e4);
  EXPECT_NEAR(c.total_s - c.logits_s, 6e4 + c.recompute_s + c.selection_s, 1e-6);
  // Without it only the last layer's compute follows the last load.
  EXPECT_LT(d.total_s, c.total_s);
}

// A horizon: each check's look-ahead reads only so far, and waits only for
// those layers. Covering every layer it is the full look-ahead; with
// loading free its compute is the layers it reaches; load-bound, a
// one-layer horizon exposes less.
TEST(CostModel, PredictBlendWithALookaheadHorizonWaitsOnlyForItsLayers) {
  ModelShape s = Tiny();
  s.layers = 8;
  HardwareSpec hw = UnitHw();
  hw.ram_tier_bw = 1e12;
  const RequestShape la = Query100(true);
  const CostModel free_load(s, hw);
  const RequestPrediction all = free_load.PredictBlend(la, 0.2, Tier::kRam);
  RequestShape wide = la, one = la;
  wide.lookahead_layers = 8;
  one.lookahead_layers = 1;
  EXPECT_DOUBLE_EQ(free_load.PredictBlend(wide, 0.2, Tier::kRam).total_s, all.total_s);
  // Checks at layers 1-4, one layer ahead each: layers 2..5 reached, 4 of
  // the 6 the full look-ahead reaches.
  const RequestPrediction near = free_load.PredictBlend(one, 0.2, Tier::kRam);
  const double base = free_load.PredictBlend(Query100(false), 0.2, Tier::kRam).selection_s;
  EXPECT_NEAR((near.selection_s - base) / (all.selection_s - base), 4.0 / 6.0, 1e-9);
  HardwareSpec slow = UnitHw();
  slow.ssd_tier_bw = free_load.KvBytesPerLayer(100) / 1e4;
  const CostModel bound(s, slow);
  const double t_all = bound.PredictBlend(la, 0.2, Tier::kSsd).total_s;
  const double t_one = bound.PredictBlend(one, 0.2, Tier::kSsd).total_s;
  EXPECT_LT(t_one, t_all);
  EXPECT_LT(LookaheadWait(bound, 100, 4, 0.2, Tier::kSsd, 1),
            LookaheadWait(bound, 100, 4, 0.2, Tier::kSsd, 0));
}

TEST(CostModel, PredictCountsAllocationAndExposedLoad) {
  HardwareSpec hw = UnitHw();
  hw.alloc_bytes_per_s = 1000;
  hw.rerotate_bytes_per_s = 64;
  hw.tier_open_s[static_cast<int>(Tier::kSsd)] = 0.5;
  CostModel m(Tiny(), hw);
  RequestShape r;
  r.context_tokens = 10;
  r.query_tokens = 2;
  r.exact_prefix_tokens = 2;
  r.cached_chunks = 3;
  // Fused f32 cache: 2 layers x {K,V} x 1 head x 4 dims x 12 tokens x 4 B = 768 B.
  const RequestPrediction p = m.PredictBlend(r, 0, Tier::kSsd);
  EXPECT_DOUBLE_EQ(p.alloc_s, 0.768);
  // Per layer: load KV(10) = 160 B at 10 B/s = 16 s + re-rotate 8 keys x 4
  // dims x 4 B = 128 B at 64 B/s = 2 s; load-bound, so all but the last
  // layer's compute is hidden: 2 x 18 on the clock, of which layer 0's
  // compute overlaps the second load.
  EXPECT_DOUBLE_EQ(p.load_s, 36);
  EXPECT_NEAR(p.exposed_load_s, 36 - p.layer0_s, 1e-9);
  // Three streams opened at 0.5 s each before the blend.
  EXPECT_DOUBLE_EQ(p.open_s, 1.5);
  EXPECT_NEAR(p.total_s, 1.5 + 0.768 + 36 + p.recompute_s + p.logits_s, 1e-9);
  // Prefix caching opens only the first chunk.
  EXPECT_DOUBLE_EQ(m.PredictPrefix(r, Tier::kSsd).open_s, 0.5);
  EXPECT_DOUBLE_EQ(m.PredictPrefix(r, Tier::kRam).open_s, 0);
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
