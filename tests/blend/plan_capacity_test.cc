// Capacity and break-even planning: record bytes per token per codec against
// the record format's layout counted by hand (docs/kv_format.md), the
// break-even rate and device counts against their formulas, determinism.
#include "blend/plan_capacity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "blend/plan_ops.h"
#include "blend/plan_parallel.h"
#include "blend/planner.h"
#include "tests/blend/plan_test_util.h"

namespace ragkv::blend {
namespace {

using ::ragkv::blend::testing::Hw;
using ::ragkv::blend::testing::Preset;

// Llama-3.1-8B: 32 layers, 8 KV heads x 128, chunks of T = 512 tokens.
// Header 64 + 4T + 8; each layer record 64 + payload (docs/kv_format.md).
TEST(PlanCapacity, RecordBytesPerTokenByHand) {
  const ModelArch a = Preset("llama-3.1-8b");
  const double T = 512, H = 8, D = 128, L = 32, HTD = H * T * D;
  const double header = 64 + 4 * T + 8;
  auto per_token = [&](double payload) { return (header + L * (64 + payload)) / T; };
  EXPECT_DOUBLE_EQ(RecordBytesPerToken(a, kvstore::Codec::kRaw, 512), per_token(2 * HTD * 2));
  EXPECT_DOUBLE_EQ(RecordBytesPerToken(a, kvstore::Codec::kInt8PerChannel, 512),
                   per_token(2 * (4 * H * D + HTD)));
  EXPECT_DOUBLE_EQ(RecordBytesPerToken(a, kvstore::Codec::kFp8E4M3PerHead, 512),
                   per_token(2 * (4 * H + HTD)));
  const double pairs_k = H * (T / 32) * D, pairs_v = H * T * (D / 32);
  EXPECT_DOUBLE_EQ(RecordBytesPerToken(a, kvstore::Codec::kInt4Grouped, 512),
                   per_token(4 * (pairs_k + pairs_v) + 2 * (HTD / 2)));
  // f16 is 128 KiB of K/V per token plus 0.4% of headers.
  EXPECT_NEAR(RecordBytesPerToken(a, kvstore::Codec::kRaw, 512) / (L * 2 * H * D * 2), 1.0,
              0.005);
}

// DeepSeek-V3's MLA record: one "head" of (512 + 64) / 2 per K and V, 61 layers.
TEST(PlanCapacity, MlaRecordHoldsTheLatent) {
  const double T = 512, per_layer = 64 + 2 * 1 * T * 288 * 2;
  EXPECT_DOUBLE_EQ(RecordBytesPerToken(Preset("deepseek-v3"), kvstore::Codec::kRaw, 512),
                   (64 + 4 * T + 8 + 61 * per_layer) / T);
}

TEST(PlanCapacity, BreakEvenAndDevicesFollowTheirFormulas) {
  const ModelArch a = Preset("llama-3.1-8b");
  const HardwareSpec hw = Hw("h100-sxm");
  AdviceWorkload w;
  CorpusWorkload c;
  c.corpus_tokens = 1e9;
  c.requests_per_s = 50;
  CapacityPrices p;
  const CapacityPlan plan = PlanCapacity(a, a, 1, hw, w, Tier::kRam, c, p);
  ASSERT_EQ(plan.codecs.size(), 4u);
  const double usd_s = p.device_usd_per_hour / 3600;
  EXPECT_DOUBLE_EQ(plan.prefill_s, PrefillPhase(a, hw, 3104).time_s);
  EXPECT_DOUBLE_EQ(plan.decode_s, 128 * DecodePhase(a, hw, 8, 3104 + 64).time_s / 8);
  EXPECT_EQ(plan.devices_full_prefill,
            static_cast<int>(std::ceil(50 * (plan.prefill_s + plan.decode_s))));
  const double chunks = std::ceil(1e9 / 512);
  EXPECT_DOUBLE_EQ(plan.precompute_device_s, chunks * PrefillPhase(a, hw, 512).time_s);
  for (const CodecCapacity& k : plan.codecs) {
    EXPECT_DOUBLE_EQ(k.corpus_bytes, chunks * 512 * k.record_bytes_per_token);
    EXPECT_DOUBLE_EQ(k.storage_usd_per_month, k.corpus_bytes / 1e9 * 3.0 / 36);
    const double cost = k.storage_usd_per_month / (30.4375 * 86400) +
                        plan.precompute_device_s * usd_s / (30 * 86400);
    EXPECT_NEAR(k.break_even_rps, cost / ((plan.prefill_s - k.blend_s) * usd_s),
                1e-9 * k.break_even_rps);
    EXPECT_LT(k.blend_s, plan.prefill_s);
    EXPECT_EQ(k.devices, static_cast<int>(std::ceil(50 * (k.blend_s + plan.decode_s))));
  }
  // Smaller records: less storage, an earlier break-even on the same tier.
  for (size_t i = 1; i < plan.codecs.size(); ++i) {
    EXPECT_LT(plan.codecs[i].corpus_bytes, plan.codecs[i - 1].corpus_bytes);
    EXPECT_LT(plan.codecs[i].break_even_rps, plan.codecs[0].break_even_rps);
  }
}

TEST(PlanCapacity, TensorParallelCountsReplicaDevices) {
  const ModelArch a = Preset("llama-3.1-70b");
  absl::StatusOr<ModelArch> s = ShardArch(a, 4, ParallelKind::kTensor);
  ASSERT_TRUE(s.ok());
  AdviceWorkload w;
  CorpusWorkload c;
  c.corpus_tokens = 1e8;
  const CapacityPlan plan =
      PlanCapacity(a, *s, 4, Hw("h100-sxm"), w, Tier::kSsd, c, CapacityPrices{});
  EXPECT_EQ(plan.devices_full_prefill % 4, 0);
  EXPECT_LT(plan.hbm_per_device_bytes, 80e9);  // a quarter of 141 GB of weights + KV
  // Storage is the whole model's KV, not one device's.
  EXPECT_DOUBLE_EQ(plan.codecs[0].record_bytes_per_token,
                   RecordBytesPerToken(a, kvstore::Codec::kRaw, 512));
}

TEST(PlanCapacity, RecommendationsAreDeterministic) {
  const ModelArch a = Preset("qwen3-30b-a3b");
  AdviceWorkload w;
  CorpusWorkload c;
  c.corpus_tokens = 2e9;
  const CapacityPlan p1 = PlanCapacity(a, a, 1, Hw("h100-sxm"), w, Tier::kRam, c, {});
  const CapacityPlan p2 = PlanCapacity(a, a, 1, Hw("h100-sxm"), w, Tier::kRam, c, {});
  const auto r1 = CapacityRecommendations(p1, c, {});
  EXPECT_EQ(r1, CapacityRecommendations(p2, c, {}));
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_NE(r1[2].find("pays for itself"), std::string::npos);
  EXPECT_EQ(CapacityJson(p1), CapacityJson(p2));
}

// The plan carries the split and the capacity plan into its sentences and
// its JSON; a split the model refuses becomes the only recommendation.
TEST(PlanCapacity, ArchPlanCarriesSplitAndCapacity) {
  PlanWorkload w;
  w.devices = 2;
  w.parallel = ParallelKind::kExpert;
  w.corpus.corpus_tokens = 1e9;
  w.kv_tier = Tier::kSsd;
  const Plan plan = MakeArchPlan(Preset("qwen3-30b-a3b"), Hw("h100-sxm"), w);
  ASSERT_TRUE(plan.capacity.has_value());
  EXPECT_EQ(plan.capacity->tier, Tier::kSsd);
  EXPECT_EQ(plan.capacity->devices_per_replica, 2);
  bool split = false;
  for (const std::string& r : plan.recommendations) split |= r.rfind("ep over 2 devices", 0) == 0;
  EXPECT_TRUE(split);
  std::ostringstream json;
  PrintPlanJson(plan, json);
  EXPECT_NE(json.str().find(R"("devices":2,"parallel":"ep")"), std::string::npos);
  EXPECT_NE(json.str().find(R"("capacity":{"tier":"ssd")"), std::string::npos);
  EXPECT_NE(json.str().find(R"("op":"ep.dispatch")"), std::string::npos);
  w.parallel = ParallelKind::kExpert;
  const Plan dense = MakeArchPlan(Preset("llama-3.1-8b"), Hw("h100-sxm"), w);
  ASSERT_EQ(dense.recommendations.size(), 1u);
  EXPECT_NE(dense.recommendations[0].find("no routed experts"), std::string::npos);
}

}  // namespace
}  // namespace ragkv::blend
