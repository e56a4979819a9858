// Recommendations are deterministic; linear-attention models are refused for
// blending by name; the legacy rows of a dense preset are unchanged by the
// per-operator analysis; the JSON carries operator intensity and bound.
#include "blend/plan_advice.h"

#include <gtest/gtest.h>

#include <sstream>

#include "absl/strings/str_format.h"

#include "blend/planner.h"
#include "tests/blend/plan_test_util.h"

namespace ragkv::blend {
namespace {

using ::ragkv::blend::testing::Hw;
using ::ragkv::blend::testing::Preset;

TEST(PlanAdvice, DeterministicForAGivenInput) {
  AdviceWorkload w;
  for (const std::string& m : {"llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "gemma-3-27b"}) {
    const std::vector<std::string> a = Recommendations(Preset(m), Hw("h100-sxm"), w);
    const std::vector<std::string> b = Recommendations(Preset(m), Hw("h100-sxm"), w);
    EXPECT_EQ(a, b) << m;
    EXPECT_GE(a.size(), 3u) << m;
  }
  // A different device gives different numbers.
  EXPECT_NE(Recommendations(Preset("llama-3.1-8b"), Hw("h100-sxm"), w),
            Recommendations(Preset("llama-3.1-8b"), Hw("mi300x"), w));
}

TEST(PlanAdvice, DecodeWhatIfCarriesTheRooflineNumber) {
  // Dense decode at batch 8 on an H100 is memory-bound in every operator, so
  // +50% bandwidth divides the operator time by 1.5 (the per-layer overhead
  // stays): the sentence's number is that change, rounded.
  AdviceWorkload w;
  const ModelArch a = Preset("llama-3.1-8b");
  const HardwareSpec hw = Hw("h100-sxm");
  const Phase p = DecodePhase(a, hw, w.decode_batch, w.context_tokens + w.query_tokens);
  const double overhead = hw.layer_overhead_s * a.layers;
  const double change = ((p.time_s - overhead) / 1.5 + overhead) / p.time_s - 1;
  const std::string expected =
      absl::StrFormat("+50%% bandwidth gives %+.0f%% time per output token", change * 100);
  bool found = false;
  for (const std::string& r : Recommendations(a, hw, w)) {
    if (r.find(expected) != std::string::npos) found = true;
  }
  EXPECT_TRUE(found) << expected;
}

TEST(PlanAdvice, HybridLinearAttentionRefusedByName) {
  const ModelArch a = Preset("qwen3-next-80b-a3b");
  absl::Status s = CheckChunkReusable(a);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("qwen3-next-80b-a3b"), std::string::npos);
  EXPECT_NE(s.message().find("36 of 48"), std::string::npos);
  const HardwareSpec hw = Hw("h200");
  EXPECT_EQ(BlendPhase(a, hw, 3072, 32, 0.15, Tier::kRam).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(BlendPhase(a, hw, 3072, 32, 0, Tier::kRam).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const Plan plan = MakeArchPlan(a, hw, PlanWorkload{});
  ASSERT_EQ(plan.rows.size(), 1u);
  EXPECT_EQ(plan.rows[0].strategy, "full-prefill");
  EXPECT_NE(plan.blend_refused.find("qwen3-next-80b-a3b"), std::string::npos);
  for (const Phase& p : plan.phases) {
    EXPECT_EQ(p.name.find("blend"), std::string::npos);
    EXPECT_EQ(p.name.find("full-reuse"), std::string::npos);
  }
  // Models with only softmax attention are reusable.
  for (const std::string& m : ArchPresetNames()) {
    if (m != "qwen3-next-80b-a3b") EXPECT_TRUE(CheckChunkReusable(Preset(m)).ok()) << m;
  }
}

TEST(PlanAdvice, LegacyRowsUnchanged) {
  absl::StatusOr<ModelShape> s = ModelPreset("llama-3-8b");
  ASSERT_TRUE(s.ok());
  const HardwareSpec hw = Hw("h100-sxm");
  const Plan legacy = MakePlan(*s, hw, PlanWorkload{});
  const Plan arch = MakeArchPlan(ArchOfShape(*s), hw, PlanWorkload{});
  ASSERT_EQ(legacy.rows.size(), arch.rows.size());
  for (size_t i = 0; i < legacy.rows.size(); ++i) {
    EXPECT_EQ(legacy.rows[i].strategy, arch.rows[i].strategy);
    EXPECT_EQ(legacy.rows[i].tier, arch.rows[i].tier);
    EXPECT_DOUBLE_EQ(legacy.rows[i].ttft_s, arch.rows[i].ttft_s);
  }
  EXPECT_FALSE(arch.phases.empty());
  EXPECT_TRUE(legacy.phases.empty());
}

TEST(PlanAdvice, JsonHasOperatorIntensityBoundAndRecommendations) {
  const Plan plan = MakeArchPlan(Preset("qwen3-30b-a3b"), Hw("h100-sxm"), PlanWorkload{});
  std::ostringstream out;
  PrintPlanJson(plan, out);
  const std::string j = out.str();
  EXPECT_NE(j.find(R"("rows":[{"strategy":"full-prefill","tier":"-","ttft_ms":)"),
            std::string::npos);
  EXPECT_NE(j.find(R"("op":"moe.experts")"), std::string::npos);
  EXPECT_NE(j.find(R"("intensity":)"), std::string::npos);
  EXPECT_NE(j.find(R"("bound":"memory")"), std::string::npos);
  EXPECT_NE(j.find(R"("recommendations":[")"), std::string::npos);
  EXPECT_EQ(j.back(), '\n');
  EXPECT_EQ(j[j.size() - 2], '}');
}

}  // namespace
}  // namespace ragkv::blend
