// The per-operator phases' compute rates (a GEMM's rate by its row count,
// attention's own rate) against hand computations, and BlendPhase's
// operators against blend::MakeSchedule (docs/planner.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "blend/blender.h"
#include "blend/cost_model.h"
#include "blend/plan_arch.h"
#include "blend/plan_ops.h"
#include "blend/planner.h"
#include "tests/blend/plan_test_util.h"

namespace ragkv::blend {
namespace {

using ::ragkv::blend::testing::ByName;
using ::ragkv::blend::testing::Preset;

const std::vector<std::pair<double, double>> kTable = {{32, 40e9}, {128, 100e9}, {512, 130e9}};

TEST(PlanRates, GemmRateInterpolatesInLogRows) {
  // 64 rows: halfway between 32 and 128 in log2 (5, 7 -> 6): 40 + 0.5 x 60.
  EXPECT_DOUBLE_EQ(GemmRateAtRows(kTable, 64, 1), 70e9);
  // 256 rows: halfway between 128 and 512: 100 + 0.5 x 30.
  EXPECT_NEAR(GemmRateAtRows(kTable, 256, 1), 115e9, 1e-3);
  // 40 rows: log(40/32) / log(4) of the way from 40 to 100.
  EXPECT_NEAR(GemmRateAtRows(kTable, 40, 1), 40e9 + std::log(1.25) / std::log(4.0) * 60e9, 1e-3);
  EXPECT_DOUBLE_EQ(GemmRateAtRows(kTable, 128, 1), 100e9);  // on an entry
  EXPECT_DOUBLE_EQ(GemmRateAtRows(kTable, 8, 1), 40e9);     // clamped below
  EXPECT_DOUBLE_EQ(GemmRateAtRows(kTable, 4096, 1), 130e9); // clamped above
  EXPECT_DOUBLE_EQ(GemmRateAtRows({}, 64, 7e12), 7e12);     // no table: the fallback
  // The stage model reads the same table.
  HardwareSpec hw;
  hw.peak_flops = 1e12;
  hw.gemm_flops_at_rows = kTable;
  EXPECT_DOUBLE_EQ(CostModel(ModelShape{}, hw).GemmFlops(64), 70e9);
}

// A CPU-like device: the table above, attention at 20 GFLOP/s, 1 TB/s (so
// every weight GEMM of 32+ rows is compute-bound).
HardwareSpec TableHw() {
  HardwareSpec hw;
  hw.peak_flops = 500e9;
  hw.mem_bw = 1e12;
  hw.gemm_flops_at_rows = kTable;
  hw.attention_flops = 20e9;
  return hw;
}

TEST(PlanRates, PrefillOperatorsRunAtTheRateForTheirRows) {
  // Llama-3.1-8B, 64 tokens: every layer's GEMMs have M = 64 (70 GFLOP/s);
  // attention at 20 GFLOP/s; the classifier's one row at the table's first
  // entry (40 GFLOP/s).
  const HardwareSpec hw = TableHw();
  auto ops = ByName(PrefillPhase(Preset("llama-3.1-8b"), hw, 64).ops);
  EXPECT_NEAR(ops["attn.qkv"].compute_s, 32 * 2.0 * 64 * 4096 * 6144 / 70e9, 1e-12);
  EXPECT_NEAR(ops["ffn"].compute_s, 32 * 2.0 * 64 * 3 * 4096 * 14336 / 70e9, 1e-12);
  EXPECT_NEAR(ops["attn.score"].compute_s, 32 * 2.0 * 4096 * (64 * 65 / 2) / 20e9, 1e-12);
  EXPECT_NEAR(ops["lm_head"].compute_s, 2.0 * 4096 * 128256 / 40e9, 1e-12);
  EXPECT_EQ(ops["ffn"].bound, "compute");
  EXPECT_DOUBLE_EQ(ops["ffn"].time_s, ops["ffn"].compute_s);
  EXPECT_DOUBLE_EQ(ops["ffn"].gemm_rows, 64);
  // FLOPs and bytes do not depend on the rates.
  HardwareSpec flat;
  flat.peak_flops = 500e9;
  flat.mem_bw = 1e12;
  auto plain = ByName(PrefillPhase(Preset("llama-3.1-8b"), flat, 64).ops);
  EXPECT_DOUBLE_EQ(plain["ffn"].flops, ops["ffn"].flops);
  EXPECT_DOUBLE_EQ(plain["ffn"].bytes, ops["ffn"].bytes);
  EXPECT_NEAR(plain["ffn"].compute_s, plain["ffn"].flops / 500e9, 1e-12);  // no table: peak
}

TEST(PlanRates, MoeExpertRowsAreTheirShareOfThePairs) {
  // Qwen3-30B-A3B (128 experts, top 8), 512 tokens: 4096 token-expert
  // pairs over D(512) = 128 (1 - (120/128)^512) distinct experts, so each
  // expert GEMM has 4096 / D rows (~32.0); router and attention GEMMs 512.
  const HardwareSpec hw = TableHw();
  auto ops = ByName(PrefillPhase(Preset("qwen3-30b-a3b"), hw, 512).ops);
  const double touched = 128 * (1 - std::pow(120.0 / 128, 512));
  const double rows = 512.0 * 8 / touched;
  EXPECT_NEAR(ops["moe.experts"].gemm_rows, rows, 1e-9);
  const double rate = 40e9 + std::log(rows / 32) / std::log(4.0) * 60e9;
  EXPECT_NEAR(ops["moe.experts"].compute_s, 48 * 2.0 * 512 * 8 * 3 * 2048 * 768 / rate, 1e-9);
  EXPECT_NEAR(ops["attn.out"].compute_s, 48 * 2.0 * 512 * 4096 * 2048 / 130e9, 1e-12);
}

TEST(PlanRates, BlendRowsFollowMakeSchedule) {
  // 6 x 256 cached tokens (the first chunk exact: S = 1280 selectable) + 32
  // query tokens, r = 0.15 on a 32-layer model.
  const ModelArch a = Preset("llama-3.1-8b");
  BlendOptions bo;
  bo.ratio = 0.15;
  const std::vector<CheckLayer> schedule = MakeSchedule(bo, 32);
  ASSERT_EQ(schedule.size(), 4u);  // the default: layers 1-4, 2r down to r
  EXPECT_EQ(schedule[0].layer, 1);
  EXPECT_DOUBLE_EQ(schedule[0].ratio, 0.30);
  EXPECT_EQ(schedule[3].layer, 4);
  EXPECT_DOUBLE_EQ(schedule[3].ratio, 0.15);
  const std::vector<BlendLayerRows> rows = BlendRowsByLayer(a, 1536, 32, 0.15, 256);
  ASSERT_EQ(rows.size(), 32u);
  EXPECT_DOUBLE_EQ(rows[0].rows, 1280 + 32);  // every selectable row
  EXPECT_DOUBLE_EQ(rows[0].probed, 0);
  double kept = 1280;  // each check probes what the previous one kept
  for (const CheckLayer& c : schedule) {
    EXPECT_DOUBLE_EQ(rows[c.layer].probed, kept) << c.layer;
    kept = std::round(c.ratio * 1280);
    EXPECT_DOUBLE_EQ(rows[c.layer].rows, kept + 32) << c.layer;
  }
  EXPECT_DOUBLE_EQ(kept, 192);
  for (int l = 5; l < 32; ++l) {
    EXPECT_DOUBLE_EQ(rows[l].rows, 224) << l;
    EXPECT_DOUBLE_EQ(rows[l].probed, 0) << l;
  }
  // Full reuse: the query only, no check.
  for (const BlendLayerRows& r : BlendRowsByLayer(a, 1536, 32, 0, 256)) {
    EXPECT_DOUBLE_EQ(r.rows, 32);
    EXPECT_DOUBLE_EQ(r.probed, 0);
  }
}

TEST(PlanRates, BlendOperatorsByHand) {
  // The same blend, each operator summed over the layers of the schedule.
  const ModelArch a = Preset("llama-3.1-8b");  // dim 4096, q 4096, kv 1024, ffn 14336
  absl::StatusOr<Phase> p = BlendPhase(a, TableHw(), 1536, 32, 0.15, Tier::kRam, 256);
  ASSERT_TRUE(p.ok()) << p.status();
  auto ops = ByName(p->ops);
  const double d = 4096, kv = 1024, ffn = 14336;
  // The default schedule (layers 1-4, 2r down to r): each check probes the
  // rows the previous one kept (1280 at layer 1) and keeps round(ratio x
  // 1280); a probe GEMM runs at the rate for its rows.
  BlendOptions bo;
  bo.ratio = 0.15;
  const std::vector<CheckLayer> schedule = MakeSchedule(bo, 32);
  ASSERT_EQ(schedule.size(), 4u);
  double probed = 0, probe_s = 0, kept = 1280, rows = 1312, later = 0;
  for (const CheckLayer& c : schedule) {
    probed += kept;
    probe_s += 2.0 * kept * d * 2 * kv / GemmRateAtRows(kTable, kept, 1);
    kept = std::round(c.ratio * 1280);
    rows += kept + 32;
    later += kept;
  }
  const int plain = 32 - 1 - static_cast<int>(schedule.size());  // layers after the checks
  rows += plain * 224.0;
  later += plain * 192.0;
  EXPECT_DOUBLE_EQ(ops["blend.probe"].flops, 2.0 * probed * d * 2 * kv);
  EXPECT_DOUBLE_EQ(ops["blend.select"].bytes, probed * (6 * d + 18 * kv) * 2);
  EXPECT_DOUBLE_EQ(ops["blend.select"].flops, 0);
  // Q for every recomputed row; K/V only for the query rows in layer 0 and
  // the check layers (exact K/V cached or just probed), for every row after.
  EXPECT_NEAR(ops["attn.qkv"].flops,
              2.0 * rows * d * d + 2.0 * (32.0 * (1 + schedule.size()) + plain * 224) * d * 2 * kv,
              1);
  EXPECT_NEAR(ops["ffn"].flops, 2.0 * rows * 3 * d * ffn, 1);
  // Attention: layer 0's rows at [256, 1568); later, the selected rows at
  // (256 + 1536 + 1) / 2 on average and the query at [1536, 1568).
  const double l0 = (1568.0 * 1569 - 256.0 * 257) / 2;
  const double query = 32.0 * 1536 + 32.0 * 33 / 2;
  EXPECT_NEAR(ops["attn.score"].flops, 2.0 * 4096 * (l0 + later * (1793.0 / 2) + 31 * query), 1);
  EXPECT_NEAR(ops["blend.probe"].compute_s, probe_s, 1e-12);
  // The query look-ahead (lookahead-deviation): from the first check
  // (layer 1) the 32 query rows forward through layers 1..30 over the 1536
  // context keys and their own, and at layers 2..31 score the context.
  const double ahead = 30;
  EXPECT_NEAR(ops["blend.lookahead.attn.qkv"].flops, ahead * 2.0 * 32 * d * (d + 2 * kv), 1);
  EXPECT_NEAR(ops["blend.lookahead.ffn"].flops, ahead * 2.0 * 32 * 3 * d * ffn, 1);
  EXPECT_NEAR(ops["blend.lookahead.attn.score"].flops, ahead * 2.0 * 4096 * query, 1);
  EXPECT_DOUBLE_EQ(ops["blend.lookahead.q"].flops, ahead * 2.0 * 32 * d * d);
  EXPECT_DOUBLE_EQ(ops["blend.lookahead.scores"].flops, ahead * 2.0 * 32 * d * 1536);
  // r = 1 drops no row: no check, no look-ahead.
  absl::StatusOr<Phase> all = BlendPhase(a, TableHw(), 1536, 32, 1.0, Tier::kRam, 256);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(ByName(all->ops).count("blend.lookahead.q"), 0u);
}

TEST(PlanRates, SlidingWindowModelChecksAtTheFirstGlobalLayer) {
  // Gemma-3-27B: layers 0-4 sliding, 5 global; MakeSchedule(options, cfg)
  // starts there (docs/gemma3.md rule 4): checks at 5-8 (the default 4).
  const ModelArch a = Preset("gemma-3-27b");
  ASSERT_NE(LayerAttention(a, 5), AttentionKind::kSliding);
  const std::vector<BlendLayerRows> rows = BlendRowsByLayer(a, 1000, 10, 0.2, 0);
  for (int l = 0; l < a.layers; ++l) {
    EXPECT_EQ(rows[l].probed > 0, l >= 5 && l <= 8) << l;
  }
  EXPECT_DOUBLE_EQ(rows[4].rows, 1010);
  EXPECT_DOUBLE_EQ(rows[5].rows, 400 + 10);
  EXPECT_DOUBLE_EQ(rows[8].rows, 200 + 10);
  EXPECT_DOUBLE_EQ(rows[9].rows, 200 + 10);
}

TEST(PlanRates, JsonCarriesEachOperatorsComputeTime) {
  // The blend of the default workload (6 x 512-token chunks: the first is
  // exact) has the probe and selection operators, each with compute_ms.
  const ModelArch a = Preset("llama-3.1-8b");
  HardwareSpec hw = TableHw();
  hw.ram_tier_bw = 50e9;
  hw.ssd_tier_bw = 5e9;
  hw.remote_tier_bw = 1e9;
  const Plan plan = MakeArchPlan(a, hw, PlanWorkload{});
  std::ostringstream out;
  PrintPlanJson(plan, out);
  const std::string j = out.str();
  EXPECT_NE(j.find(R"("op":"blend.probe")"), std::string::npos);
  EXPECT_NE(j.find(R"("share":)"), std::string::npos);
  for (const Phase& p : plan.phases) {
    for (const OpCost& c : p.ops) {
      if (c.op.rfind("kv_load", 0) == 0 || c.collectives > 0) continue;
      EXPECT_DOUBLE_EQ(c.time_s, std::max(c.compute_s, c.bytes / hw.mem_bw)) << p.name << c.op;
      // Printed with 6 significant digits.
      char field[64];
      std::snprintf(field, sizeof(field), R"("compute_ms":%.6g)", c.compute_s * 1e3);
      EXPECT_NE(j.find(field), std::string::npos) << field;
    }
  }
}

}  // namespace
}  // namespace ragkv::blend
