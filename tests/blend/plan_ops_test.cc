// Per-operator FLOPs and bytes of one dense, one MoE and one MLA layer against
// hand counts written from the config numbers (docs/planner.md formulas).
#include "blend/plan_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "blend/plan_arch.h"
#include "tests/blend/plan_test_util.h"

namespace ragkv::blend {
namespace {

using ::ragkv::blend::testing::ByName;
using ::ragkv::blend::testing::Preset;

// Llama-3.1-8B: dim 4096, 32 heads x 128, 8 KV heads, ffn 14336, bf16.
TEST(PlanOps, DenseLayerByHand) {
  LayerLoad x;
  x.rows = 4;
  x.visible_keys = 10;
  x.kv_read_tokens = 6;
  x.moe_tokens = 4;
  auto ops = ByName(LayerOps(Preset("llama-3.1-8b"), 0, x));
  ASSERT_EQ(ops.size(), 5u);
  // q (4096) + k, v (2 x 8 x 128 = 2048) = 6144 outputs.
  EXPECT_DOUBLE_EQ(ops["attn.qkv"].flops, 2.0 * 4 * 4096 * 6144);
  EXPECT_DOUBLE_EQ(ops["attn.qkv"].bytes, 4096.0 * 6144 * 2 + 4 * (4096.0 + 6144) * 2);
  EXPECT_DOUBLE_EQ(ops["attn.qkv"].weight_bytes, 4096.0 * 6144 * 2);
  // Score: 2 x (32 x 128) x 10 visible keys; reads K of 6 tokens (1024 x 2 B) + q.
  EXPECT_DOUBLE_EQ(ops["attn.score"].flops, 2.0 * 4096 * 10);
  EXPECT_DOUBLE_EQ(ops["attn.score"].bytes, 6.0 * 1024 * 2 + 4.0 * 4096 * 2);
  EXPECT_DOUBLE_EQ(ops["attn.value"].flops, 2.0 * 4096 * 10);
  EXPECT_DOUBLE_EQ(ops["attn.out"].flops, 2.0 * 4 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(ops["attn.out"].bytes, 4096.0 * 4096 * 2 + 4 * 8192.0 * 2);
  // SwiGLU: gate, up, down = 3 x 4096 x 14336; activations 2 dim + 3 ffn per row.
  EXPECT_DOUBLE_EQ(ops["ffn"].flops, 2.0 * 4 * 3 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(ops["ffn"].bytes,
                   3.0 * 4096 * 14336 * 2 + 4 * (2.0 * 4096 + 3.0 * 14336) * 2);
}

// Qwen3-30B-A3B: dim 2048, 32 heads x 128, 4 KV heads, 128 experts, top-8,
// expert ffn 768, bf16.
TEST(PlanOps, MoeLayerByHand) {
  LayerLoad x;
  x.rows = 4;
  x.visible_keys = 10;
  x.kv_read_tokens = 6;
  x.moe_tokens = 4;
  auto ops = ByName(LayerOps(Preset("qwen3-30b-a3b"), 0, x));
  ASSERT_EQ(ops.count("ffn"), 0u);
  EXPECT_DOUBLE_EQ(ops["attn.qkv"].flops, 2.0 * 4 * 2048 * (4096 + 2 * 512));
  EXPECT_DOUBLE_EQ(ops["moe.router"].flops, 2.0 * 4 * 2048 * 128);
  EXPECT_DOUBLE_EQ(ops["moe.router"].bytes, 2048.0 * 128 * 2 + 4 * (2048.0 + 128) * 2);
  EXPECT_DOUBLE_EQ(ops["moe.experts"].flops, 2.0 * 4 * 8 * 3 * 2048 * 768);
  const double touched = 128 * (1 - std::pow(120.0 / 128, 4));  // 29.12 of 128
  EXPECT_NEAR(touched, 29.123, 0.001);
  EXPECT_NEAR(ops["moe.experts"].bytes,
              touched * 3 * 2048 * 768 * 2 + 4 * 8 * (2.0 * 2048 + 3.0 * 768) * 2, 1e-3);
  EXPECT_EQ(ops.count("moe.shared"), 0u);
}

TEST(PlanOps, DistinctExperts) {
  EXPECT_DOUBLE_EQ(DistinctExperts(8, 2, 1), 2);            // one token: exactly k
  EXPECT_NEAR(DistinctExperts(8, 2, 1000), 8, 1e-9);         // many tokens: all
  EXPECT_DOUBLE_EQ(DistinctExperts(8, 2, 2), 8 * (1 - 0.75 * 0.75));
  EXPECT_DOUBLE_EQ(DistinctExperts(0, 0, 5), 0);
}

// DeepSeek-V3 layer 3 (the first MoE layer): dim 7168, 128 heads, q_lora
// 1536, kv_lora 512, qk nope 128 + rope 64, v 128, 256 experts top-8 of
// width 2048 + 1 shared, FP8 weights (1 B), bf16 activations and KV.
TEST(PlanOps, MlaLayerAbsorbedByHand) {
  LayerLoad x;
  x.rows = 2;
  x.visible_keys = 100;
  x.kv_read_tokens = 100;
  x.moe_tokens = 2;
  auto ops = ByName(LayerOps(Preset("deepseek-v3"), 3, x));
  EXPECT_DOUBLE_EQ(ops["mla.q_down"].flops, 2.0 * 2 * 7168 * 1536);
  EXPECT_DOUBLE_EQ(ops["mla.q_down"].bytes, 7168.0 * 1536 * 1 + 2 * (7168.0 + 1536) * 2);
  EXPECT_DOUBLE_EQ(ops["mla.q_up"].flops, 2.0 * 2 * 1536 * (128 * 192));
  EXPECT_DOUBLE_EQ(ops["mla.kv_down"].flops, 2.0 * 2 * 7168 * (512 + 64));
  EXPECT_DOUBLE_EQ(ops["mla.absorb"].flops, 2.0 * 2 * 128 * 128 * 512 + 2.0 * 2 * 128 * 512 * 128);
  EXPECT_DOUBLE_EQ(ops["mla.absorb"].bytes,
                   512.0 * 128 * (128 + 128) * 1 + 2.0 * 128 * (128 + 2 * 512 + 128) * 2);
  // Attention over the latent: 576 dims for scores, 512 for values; the
  // latent of 100 tokens is read once (2 B per element).
  EXPECT_DOUBLE_EQ(ops["attn.score"].flops, 2.0 * 128 * 576 * 100);
  EXPECT_DOUBLE_EQ(ops["attn.score"].bytes, 100.0 * 576 * 2 + 2.0 * 128 * 576 * 2);
  EXPECT_DOUBLE_EQ(ops["attn.value"].flops, 2.0 * 128 * 512 * 100);
  EXPECT_DOUBLE_EQ(ops["attn.value"].bytes, 2.0 * 128 * 512 * 2);
  EXPECT_DOUBLE_EQ(ops["attn.out"].flops, 2.0 * 2 * (128 * 128) * 7168);
  EXPECT_DOUBLE_EQ(ops["moe.shared"].flops, 2.0 * 2 * 3 * 7168 * 2048);
  EXPECT_DOUBLE_EQ(ops["moe.shared"].bytes,
                   3.0 * 7168 * 2048 * 1 + 2 * (2.0 * 7168 + 3.0 * 2048) * 2);
  EXPECT_EQ(ops.count("mla.kv_up"), 0u);
}

TEST(PlanOps, MlaDecompressedWhenRowsCoverKeys) {
  LayerLoad x;
  x.rows = x.kv_read_tokens = x.moe_tokens = 8;
  x.visible_keys = 36;  // 8 x 9 / 2
  auto ops = ByName(LayerOps(Preset("deepseek-v3"), 0, x));
  EXPECT_DOUBLE_EQ(ops["mla.kv_up"].flops, 2.0 * 8 * 512 * (128 * (128 + 128)));
  EXPECT_DOUBLE_EQ(ops["attn.score"].flops, 2.0 * 128 * 192 * 36);
  EXPECT_DOUBLE_EQ(ops["ffn"].flops, 2.0 * 8 * 3 * 7168 * 18432);  // layers 0-2 are dense
  EXPECT_EQ(ops.count("mla.absorb"), 0u);
}

TEST(PlanOps, LinearAttentionLayerByHand) {
  // Qwen3-Next layer 0 is linear: 16 key heads x 128, 32 value heads x 128.
  LayerLoad x;
  x.rows = x.moe_tokens = 4;
  x.sequences = 1;
  auto ops = ByName(LayerOps(Preset("qwen3-next-80b-a3b"), 0, x));
  EXPECT_DOUBLE_EQ(ops["lin.in_proj"].flops,
                   2.0 * 4 * 2048 * (2 * 2048 + 2 * 4096 + 2 * 32));
  EXPECT_DOUBLE_EQ(ops["lin.recurrence"].flops, 6.0 * 32 * 128 * 128 * 4);
  EXPECT_DOUBLE_EQ(ops["lin.recurrence"].bytes, 2.0 * 32 * 128 * 128 * 4);
  EXPECT_EQ(ops.count("attn.score"), 0u);
}

TEST(PlanArch, LayerPatterns) {
  const ModelArch gemma = Preset("gemma-3-27b");
  EXPECT_EQ(LayerAttention(gemma, 0), AttentionKind::kSliding);
  EXPECT_EQ(LayerAttention(gemma, 5), AttentionKind::kGlobal);
  EXPECT_EQ(CountLayers(gemma, AttentionKind::kGlobal), 10);  // layers 5, 11, ..., 59
  const ModelArch oss = Preset("gpt-oss-120b");
  EXPECT_EQ(LayerAttention(oss, 0), AttentionKind::kSliding);
  EXPECT_EQ(CountLayers(oss, AttentionKind::kGlobal), 18);
  const ModelArch next = Preset("qwen3-next-80b-a3b");
  EXPECT_EQ(LayerAttention(next, 3), AttentionKind::kGlobal);
  EXPECT_EQ(CountLayers(next, AttentionKind::kLinear), 36);
  const ModelArch ds = Preset("deepseek-v3");
  EXPECT_FALSE(IsMoeLayer(ds, 2));
  EXPECT_TRUE(IsMoeLayer(ds, 3));
}

TEST(PlanArch, KvBytes) {
  // DeepSeek-V3: 61 layers x (512 + 64) latent elements x 2 B per token.
  EXPECT_DOUBLE_EQ(KvBytes(Preset("deepseek-v3"), 1), 61.0 * 576 * 2);
  // Gemma-3-27B at 2048 tokens: 10 global layers keep 2048, 52 sliding keep 1024.
  EXPECT_DOUBLE_EQ(KvBytes(Preset("gemma-3-27b"), 2048),
                   (10.0 * 2048 + 52.0 * 1024) * 2 * 16 * 128 * 2);
  // Qwen3-Next: only the 12 full-attention layers keep KV (2 heads x 256).
  EXPECT_DOUBLE_EQ(KvBytes(Preset("qwen3-next-80b-a3b"), 1), 12.0 * 2 * 2 * 256 * 2);
}

// Total parameters against the published totals (the models' cards): an
// independent check of the per-layer weight formulas.
TEST(PlanArch, WeightBytesMatchPublishedParameterCounts) {
  EXPECT_NEAR(WeightBytes(Preset("llama-3.1-8b")) / 2, 8.03e9, 0.02 * 8.03e9);
  EXPECT_NEAR(WeightBytes(Preset("mixtral-8x7b")) / 2, 46.7e9, 0.02 * 46.7e9);
  EXPECT_NEAR(WeightBytes(Preset("qwen3-30b-a3b")) / 2, 30.5e9, 0.02 * 30.5e9);
  EXPECT_NEAR(WeightBytes(Preset("qwen3-235b-a22b")) / 2, 235e9, 0.02 * 235e9);
  EXPECT_NEAR(WeightBytes(Preset("deepseek-v3")) / 1, 671e9, 0.02 * 671e9);  // FP8: 1 B each
}

TEST(PlanPhases, PrefillSumsLayers) {
  const ModelArch a = Preset("llama-3.1-8b");
  HardwareSpec hw;
  hw.peak_flops = 1e15;
  hw.mem_bw = 1e12;
  const Phase p = PrefillPhase(a, hw, 100);
  auto ops = ByName(p.ops);
  // Every layer: 100 rows, 100 x 101 / 2 visible keys.
  EXPECT_DOUBLE_EQ(ops["attn.score"].flops, 32 * 2.0 * 4096 * 5050);
  EXPECT_DOUBLE_EQ(ops["ffn"].flops, 32 * 2.0 * 100 * 3 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(ops["lm_head"].flops, 2.0 * 4096 * 128256);  // last row only
  double share = 0;
  for (const OpCost& c : p.ops) share += c.share;
  EXPECT_NEAR(share, 1, 1e-12);
}

TEST(PlanPhases, SlidingWindowPrefillCountsWindowedKeys) {
  // Gemma-3-27B, 2000 tokens: 10 global layers see 2000 x 2001 / 2 keys; 52
  // sliding layers (window 1024) see 1 + 2 + ... + 1023 = 523776 for the
  // first 1023 positions and 1024 for each of the other 977.
  HardwareSpec hw;
  hw.peak_flops = 1e15;
  hw.mem_bw = 1e12;
  auto ops = ByName(PrefillPhase(Preset("gemma-3-27b"), hw, 2000).ops);
  const double global = 2000.0 * 2001 / 2, sliding = 523776.0 + 977.0 * 1024;
  EXPECT_DOUBLE_EQ(ops["attn.score"].flops, 2.0 * 32 * 128 * (10 * global + 52 * sliding));
}

TEST(PlanPhases, MoeDecodeReadsTheDistinctExperts) {
  // Qwen3-30B-A3B decode, batch 8: 48 MoE layers, each reading the weights of
  // D(8) = 128 (1 - (120/128)^8) experts of 3 x 2048 x 768 bf16 weights.
  HardwareSpec hw;
  hw.peak_flops = 1e15;
  hw.mem_bw = 1e12;
  auto ops = ByName(DecodePhase(Preset("qwen3-30b-a3b"), hw, 8, 1000).ops);
  const double touched = 128 * (1 - std::pow(120.0 / 128, 8));
  EXPECT_NEAR(ops["moe.experts"].bytes,
              48 * (touched * 3 * 2048 * 768 * 2 + 8 * 8 * (2.0 * 2048 + 3.0 * 768) * 2), 1e-2);
  EXPECT_DOUBLE_EQ(ops["moe.experts"].flops, 48 * 2.0 * 8 * 8 * 3 * 2048 * 768);
  // Attention reads each sequence's 1000 cached tokens: K = 8 x 1000.
  EXPECT_DOUBLE_EQ(ops["attn.score"].bytes, 48 * (8000.0 * 512 * 2 + 8 * 4096.0 * 2));
}

TEST(PlanPhases, DecodeIsMemoryBoundAndScalesWithBandwidth) {
  const ModelArch a = Preset("llama-3.1-8b");
  absl::StatusOr<HardwareSpec> hw = HardwarePreset("h100-sxm");
  ASSERT_TRUE(hw.ok());
  const Phase p = DecodePhase(a, *hw, 1, 1000);
  EXPECT_EQ(p.bound, "memory");
  for (const OpCost& c : p.ops) EXPECT_EQ(c.bound, "memory") << c.op;
  HardwareSpec faster = *hw;
  faster.mem_bw *= 1.5;
  const double overhead = hw->layer_overhead_s * a.layers;
  EXPECT_NEAR(DecodePhase(a, faster, 1, 1000).time_s, (p.time_s - overhead) / 1.5 + overhead,
              1e-12);
}

TEST(PlanPhases, KvLoadPerTier) {
  // Llama-3.1-8B, 1000 tokens: 32 layers x 2 x 8 x 128 x 2 B = 128 KiB per token.
  absl::StatusOr<HardwareSpec> hw = HardwarePreset("h100-sxm");
  ASSERT_TRUE(hw.ok());
  auto ops = ByName(KvLoadPhase(Preset("llama-3.1-8b"), *hw, 1000).ops);
  const double bytes = 1000.0 * 32 * 2 * 8 * 128 * 2;
  EXPECT_DOUBLE_EQ(ops["kv_load.hbm"].time_s, bytes / 3350e9);
  EXPECT_DOUBLE_EQ(ops["kv_load.ram"].time_s, bytes / 55e9);
  EXPECT_DOUBLE_EQ(ops["kv_load.ssd"].time_s, bytes / 7e9);
  EXPECT_DOUBLE_EQ(ops["kv_load.redis"].time_s, bytes / 12.5e9);
  EXPECT_EQ(ops["kv_load.ssd"].bound, "link");
}

TEST(PlanPhases, CapacityMarksWeightOperators) {
  absl::StatusOr<HardwareSpec> hw = HardwarePreset("h100-sxm");
  ASSERT_TRUE(hw.ok());
  const Phase p = DecodePhase(Preset("deepseek-v3"), *hw, 8, 4096);
  EXPECT_FALSE(p.fits);  // 671 GB of FP8 weights on an 80 GB device
  auto ops = ByName(p.ops);
  EXPECT_EQ(ops["moe.experts"].bound, "capacity");
  EXPECT_NE(ops["attn.score"].bound, "capacity");  // no weights
}

}  // namespace
}  // namespace ragkv::blend
