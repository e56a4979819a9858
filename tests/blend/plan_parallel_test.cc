// Tensor and expert parallelism: per-device FLOPs and bytes of a sharded
// layer and its collectives against hand counts (docs/planner.md
// "Parallelism"), the link timing, and the refusals.
#include "blend/plan_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "blend/plan_ops.h"
#include "tests/blend/plan_test_util.h"

namespace ragkv::blend {
namespace {

using ::ragkv::blend::testing::ByName;

ModelArch Shard(const std::string& name, int n, ParallelKind kind) {
  absl::StatusOr<ModelArch> a = ArchPreset(name);
  EXPECT_TRUE(a.ok()) << a.status();
  absl::StatusOr<ModelArch> s = ShardArch(*a, n, kind);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

LayerLoad Rows(double r) {
  LayerLoad x;
  x.rows = x.moe_tokens = x.sequences = r;
  x.visible_keys = 10 * r;
  x.kv_read_tokens = 10 * r;
  return x;
}

// Llama-3.1-70B over 8 devices: dim 8192, 64 heads x 128 -> 8 per device,
// 8 KV heads -> 1, ffn 28672 -> 3584; two ring all-reduces of R x 8192 bf16.
TEST(PlanParallel, TensorParallelDenseLayerByHand) {
  const ModelArch s = Shard("llama-3.1-70b", 8, ParallelKind::kTensor);
  auto ops = ByName(LayerOps(s, 0, Rows(4)));
  EXPECT_DOUBLE_EQ(ops["attn.qkv"].flops, 2.0 * 4 * 8192 * (1024 + 2 * 128));
  EXPECT_DOUBLE_EQ(ops["attn.qkv"].weight_bytes, 8192.0 * (1024 + 256) * 2);
  EXPECT_DOUBLE_EQ(ops["attn.out"].flops, 2.0 * 4 * 1024 * 8192);
  EXPECT_DOUBLE_EQ(ops["ffn"].flops, 2.0 * 4 * 3 * 8192 * 3584);
  // K of 40 tokens, one KV head of 128 on this device, 2 B each.
  EXPECT_DOUBLE_EQ(ops["attn.score"].bytes, 40.0 * 128 * 2 + 4.0 * 1024 * 2);
  const double msg = 4.0 * 8192 * 2;
  EXPECT_DOUBLE_EQ(ops["tp.allreduce"].bytes, 2 * (2 * 7.0 / 8 * msg));
  EXPECT_DOUBLE_EQ(ops["tp.allreduce"].collectives, 2);
  EXPECT_DOUBLE_EQ(ops["tp.allreduce"].flops, 0);
  // Per-device weights: an eighth of every layer and of the vocabulary.
  absl::StatusOr<ModelArch> full = ArchPreset("llama-3.1-70b");
  EXPECT_NEAR(WeightBytes(s) / WeightBytes(*full), 1.0 / 8, 1e-9);
}

// Qwen3-30B-A3B over 4 devices, expert parallel: attention tp (32 -> 8
// heads, 4 -> 1 KV head), 128 experts -> 32 per device, top-8 of width 768.
TEST(PlanParallel, ExpertParallelMoeLayerByHand) {
  const ModelArch s = Shard("qwen3-30b-a3b", 4, ParallelKind::kExpert);
  const double R = 16;
  auto ops = ByName(LayerOps(s, 0, Rows(R)));
  EXPECT_DOUBLE_EQ(ops["attn.qkv"].flops, 2.0 * R * 2048 * (1024 + 2 * 128));
  // This device computes a quarter of the 16 x 8 token-expert pairs.
  EXPECT_DOUBLE_EQ(ops["moe.experts"].flops, 2.0 * R * 8 / 4 * 3 * 2048 * 768);
  const double touched = 128 * (1 - std::pow(120.0 / 128, R)) / 4;
  EXPECT_NEAR(ops["moe.experts"].weight_bytes, touched * 3 * 2048 * 768 * 2, 1e-3);
  EXPECT_NEAR(ops["moe.experts"].bytes,
              touched * 3 * 2048 * 768 * 2 + R * 2 * (2.0 * 2048 + 3 * 768) * 2, 1e-3);
  const double msg = R * 2048 * 2;
  EXPECT_DOUBLE_EQ(ops["tp.allreduce"].bytes, 2 * 3.0 / 4 * msg);
  EXPECT_DOUBLE_EQ(ops["tp.allreduce"].collectives, 1);
  // Dispatch: this device's R/4 tokens, 8 copies of 2048 bf16, 3/4 leave.
  EXPECT_DOUBLE_EQ(ops["ep.dispatch"].bytes, R / 4 * 8 * 2048 * 2 * 3.0 / 4);
  EXPECT_DOUBLE_EQ(ops["ep.combine"].bytes, ops["ep.dispatch"].bytes);
  EXPECT_DOUBLE_EQ(ops["ep.allgather"].bytes, 3.0 / 4 * msg);
  // Routed experts a quarter per device; the rest split like tp.
  absl::StatusOr<ModelArch> full = ArchPreset("qwen3-30b-a3b");
  EXPECT_LT(WeightBytes(s), WeightBytes(*full) / 3.9);
}

// MLA's latent is not per head: tensor parallelism leaves the cache whole.
TEST(PlanParallel, MlaLatentReplicatedUnderTensorParallel) {
  absl::StatusOr<ModelArch> full = ArchPreset("deepseek-v3");
  ASSERT_TRUE(full.ok());
  const ModelArch s = Shard("deepseek-v3", 8, ParallelKind::kTensor);
  EXPECT_DOUBLE_EQ(KvBytes(s, 1000), KvBytes(*full, 1000));
  EXPECT_EQ(s.heads, 16);
  const ModelArch g = Shard("llama-3.1-70b", 8, ParallelKind::kTensor);
  absl::StatusOr<ModelArch> l = ArchPreset("llama-3.1-70b");
  EXPECT_DOUBLE_EQ(KvBytes(g, 1000) * 8, KvBytes(*l, 1000));
}

TEST(PlanParallel, CollectiveTimeIsBytesOverLinkPlusLatency) {
  absl::StatusOr<HardwareSpec> hw = HardwarePreset("h100-sxm");
  ASSERT_TRUE(hw.ok());
  const ModelArch s = Shard("llama-3.1-70b", 8, ParallelKind::kTensor);
  const Phase p = DecodePhase(s, *hw, 8, 1000);
  auto ops = ByName(p.ops);
  const double bytes = 80 * 2 * (2 * 7.0 / 8 * 8 * 8192 * 2);
  EXPECT_DOUBLE_EQ(ops["tp.allreduce"].bytes, bytes);
  EXPECT_NEAR(ops["tp.allreduce"].time_s, bytes / 450e9 + 160 * 10e-6, 1e-12);
  EXPECT_EQ(ops["tp.allreduce"].bound, "link");
  // The collectives are part of the decode step (not overlapped).
  double sum = 0;
  for (const OpCost& c : p.ops) sum += c.time_s;
  EXPECT_NEAR(p.time_s, sum + hw->layer_overhead_s * s.layers, 1e-12);
  // One device's decode moves an eighth of the weights: faster than one H100
  // alone holding all of them, slower than 8x faster (collectives).
  absl::StatusOr<ModelArch> full = ArchPreset("llama-3.1-70b");
  const double one = DecodePhase(*full, *hw, 8, 1000).time_s;
  EXPECT_LT(p.time_s, one / 4);
  EXPECT_GT(p.time_s, one / 8);
}

TEST(PlanParallel, Refusals) {
  absl::StatusOr<ModelArch> dense = ArchPreset("llama-3.1-8b");
  ASSERT_TRUE(dense.ok());
  EXPECT_FALSE(ShardArch(*dense, 4, ParallelKind::kExpert).ok());  // no experts
  EXPECT_FALSE(ShardArch(*dense, 3, ParallelKind::kTensor).ok());  // 32 heads
  EXPECT_FALSE(ShardArch(*dense, 0, ParallelKind::kTensor).ok());
  absl::StatusOr<ModelArch> same = ShardArch(*dense, 1, ParallelKind::kTensor);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->heads, 32);
  EXPECT_TRUE(LayerOps(*same, 0, Rows(2)).size() == 5u);  // no collectives
  EXPECT_FALSE(ParseParallel("dp").ok());
  EXPECT_EQ(*ParseParallel("ep"), ParallelKind::kExpert);
}

}  // namespace
}  // namespace ragkv::blend
