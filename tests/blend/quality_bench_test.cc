// `ragkv bench quality` as a library call: the xchunk instrument opens the
// gap it is for (full prefill right, full KV reuse wrong, CacheBlend back to
// full prefill) and the selector / adaptive lines appear; bad options are
// refused by name.
#include "bench/blend/bench_quality.h"

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "blend/xchunk_task.h"
#include "blend_test_util.h"

namespace ragkv::blend {
namespace {

const StrategyQuality* Find(const std::vector<StrategyQuality>& rows, const std::string& family,
                            double ratio = -1) {
  for (const auto& r : rows) {
    if (r.family == family && (ratio < 0 || std::abs(r.ratio - ratio) < 1e-9)) return &r;
  }
  return nullptr;
}

// Measured on 200 prompts (docs/benchmarks.md): full prefill 1.00, full
// reuse 0.08, CacheBlend r = 0.15 1.00. Asserted with room for 60 prompts.
TEST(QualityBenchTest, XchunkInstrumentSeparatesReuseFromRecompute) {
  QualityBenchOptions o;
  o.task = "xchunk";
  o.model_path = XchunkModelPath();
  o.prompts = 60;
  o.seed = 3;
  o.chunks = 4;
  o.ratios = {0.15};
  o.selectors = {"chunk-head", "query-attention"};
  std::ostringstream out;
  auto rows = RunQualityBench(o, out);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const auto* full = Find(*rows, "full-prefill");
  const auto* reuse = Find(*rows, "full-reuse");
  const auto* blend = Find(*rows, "gradual", 0.15);
  ASSERT_TRUE(full && reuse && blend) << out.str();
  EXPECT_GE(full->accuracy, 0.90) << out.str();
  EXPECT_LE(reuse->accuracy, full->accuracy - 0.15) << out.str();
  EXPECT_GE(blend->accuracy, full->accuracy - 0.05) << out.str();
  // The passage that opens with the answer is what EPIC recomputes too; the
  // query's attention lands on the key, not on the value that went wrong.
  EXPECT_GE(Find(*rows, "sel-chunk-head")->accuracy, full->accuracy - 0.05);
  EXPECT_LT(Find(*rows, "sel-query-attention")->accuracy, blend->accuracy);
  const std::string s = out.str();
  for (const char* line : {"accuracy strategy=full-prefill r=1.00 acc=",
                           "accuracy strategy=full-reuse r=0.00 acc=",
                           "accuracy strategy=prefix-reuse r=0.00 acc=",
                           "accuracy strategy=cacheblend-gradual r=0.15 acc=",
                           "accuracy strategy=cacheblend-single r=0.15 acc=",
                           "accuracy strategy=bottom-right r=0.15 acc=",
                           "accuracy strategy=cacheblend-gradual-chunk-head r=0.15 acc="}) {
    EXPECT_NE(s.find(line), std::string::npos) << line << "\n" << s;
  }
}

TEST(QualityBenchTest, AdaptiveLinesCarryTheirMeanRatioAndAMatchedFixedRatio) {
  const std::string model = testing::ModelsDir() + "/stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not present";
  QualityBenchOptions o;
  o.model_path = model;
  o.prompts = 2;
  o.chunks = 3;
  o.chunk_tokens_min = o.chunk_tokens_max = 24;
  o.query_tokens = 4;
  o.continuation_tokens = 4;
  o.ratios = {0.15};
  o.adaptive = true;
  o.adaptive_masses = {0.5};
  std::ostringstream out;
  auto rows = RunQualityBench(o, out);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const auto* a = Find(*rows, "adaptive");
  const auto* m = Find(*rows, "matched");
  ASSERT_TRUE(a && m) << out.str();
  EXPECT_GE(a->mean_r, 0.02);
  EXPECT_LE(a->mean_r, o.adaptive_max);
  EXPECT_NEAR(m->ratio, a->mean_r, 1e-4);
  EXPECT_NE(out.str().find("adaptive-gradual mass=0.50: kl="), std::string::npos) << out.str();
  EXPECT_NE(out.str().find(" mean_r="), std::string::npos);
}

TEST(QualityBenchTest, BadOptionsAreRefusedByName) {
  const std::string model = testing::ModelsDir() + "/stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not present";
  std::ostringstream out;
  QualityBenchOptions o;
  o.model_path = model;
  o.task = "xchunk";  // stories260K is not the instrument
  auto r = RunQualityBench(o, out);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("xchunk checkpoint"), std::string::npos) << r.status();
  o.task = "trivia";
  EXPECT_NE(RunQualityBench(o, out).status().message().find("unknown task"), std::string::npos);
  o.task = "story";
  o.selectors = {"random"};
  o.prompts = 1;
  EXPECT_NE(RunQualityBench(o, out).status().message().find("unknown selector 'random'"),
            std::string::npos);
  o.selectors.clear();
  o.task = "xchunk";
  o.model_path = XchunkModelPath();
  o.chunks = 1;
  EXPECT_NE(RunQualityBench(o, out).status().message().find("chunks"), std::string::npos);
}

}  // namespace
}  // namespace ragkv::blend
