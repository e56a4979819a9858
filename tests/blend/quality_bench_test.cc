// `ragkv bench quality` as a library call: the xchunk instrument opens the
// gap it is for (full prefill right, full KV reuse wrong, CacheBlend back to
// full prefill) and the selector / adaptive lines appear; bad options are
// refused by name.
#include "bench/blend/bench_quality.h"
#include "bench/blend/bootstrap.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "blend/xchunk_task.h"
#include "blend_test_util.h"
#include "tests/support/require.h"

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
  o.selectors = {"chunk-head", "query-attention", "deviation+attention"};
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
  // The previous default (deviation + attention, summed) finds the broken
  // value row too; the new default (attended deviation) is the `gradual` row.
  EXPECT_GE(Find(*rows, "sel-deviation+attention")->accuracy, full->accuracy - 0.05);
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
  RAGKV_REQUIRE_OR_SKIP(std::filesystem::exists(model)) << model << " not present";
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

// The store codecs on the instrument (f16 records as the baseline): the
// blend reading 8- or 4-bit records agrees with the blend reading f16 (issue
// 20's goal: <= 0.005 accuracy loss; asserted with one prompt's room on 60
// prompts). Sizes: the instrument's chunks are short (~16 tokens, 2 KV heads
// of 32), so the per-record header, the 64-byte layer prefixes and int8's
// per-channel scales weigh: fp8 measured 1.93x smaller, int8 1.51x, int4
// 2.66x (KvChunk.EightBitCodecsHalveTheF16Record checks a realistic shape).
// Measured figures: docs/benchmarks.md.
TEST(QualityBenchTest, QuantizedCodecsKeepTheInstrumentsAccuracy) {
  QualityBenchOptions o;
  o.task = "xchunk";
  o.model_path = XchunkModelPath();
  o.prompts = 60;
  o.seed = 5;
  o.chunks = 4;
  o.ratios = {0.15};
  o.kv_dtype = kernels::DType::kF16;
  o.kv_codecs = {"int8", "fp8", "int4"};
  std::ostringstream out;
  auto rows = RunQualityBench(o, out);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const auto* raw = Find(*rows, "gradual", 0.15);
  ASSERT_NE(raw, nullptr) << out.str();
  const std::map<std::string, double> min_ratio = {{"int8", 1.4}, {"fp8", 1.85}, {"int4", 2.5}};
  for (const char* codec : {"int8", "fp8", "int4"}) {
    const auto* c = Find(*rows, std::string("codec-") + codec + "-gradual", 0.15);
    const auto* reuse = Find(*rows, std::string("codec-") + codec + "-full-reuse");
    ASSERT_TRUE(c && reuse) << out.str();
    EXPECT_EQ(c->codec, codec);
    EXPECT_GE(raw->bytes_per_token / c->bytes_per_token, min_ratio.at(codec)) << out.str();
    EXPECT_GE(c->accuracy, raw->accuracy - 1.0 / 60 - 1e-9) << out.str();
    EXPECT_NEAR(c->dacc_vs_raw, c->accuracy - raw->accuracy, 1e-12);
    EXPECT_GE(c->top1_vs_raw, 0.93) << out.str();  // int4 measured 0.970 on 200 prompts
    EXPECT_LT(c->kl_vs_raw, 0.05) << out.str();
    EXPECT_GT(c->kl_vs_raw, 0.0) << out.str();  // the codec did round something
    // The KL ratio is the two rows' KLs over the same positions, inside its interval.
    EXPECT_NEAR(c->kl_x_raw, c->kl / raw->kl, 1e-9 + 1e-9 * c->kl_x_raw) << out.str();
    EXPECT_LE(c->kl_x_raw_lo, c->kl_x_raw) << out.str();
    EXPECT_GE(c->kl_x_raw_hi, c->kl_x_raw) << out.str();
    EXPECT_NE(out.str().find(absl::StrCat("codec codec=", codec, " strategy=gradual r=0.15")),
              std::string::npos)
        << out.str();
  }
  EXPECT_NE(out.str().find("codec codec=raw dtype=f16 bytes_per_token="), std::string::npos);
}

// BootstrapRatio against cases worked by hand.
TEST(BootstrapRatioTest, MatchesHandWorkedCases) {
  // Every pair has ratio 2: every resample does too.
  const RatioInterval c = BootstrapRatio({2, 4, 6}, {1, 2, 3});
  EXPECT_DOUBLE_EQ(c.ratio, 2.0);
  EXPECT_DOUBLE_EQ(c.lo, 2.0);
  EXPECT_DOUBLE_EQ(c.hi, 2.0);
  // Two pairs (1/1, 3/1): a resample is {1,1}, {1,3} or {3,3} with
  // probabilities 1/4, 1/2, 1/4, i.e. ratio 1, 2 or 3: the 2.5th and 97.5th
  // percentiles of 2,000 resamples are 1 and 3.
  const RatioInterval t = BootstrapRatio({1, 3}, {1, 1});
  EXPECT_DOUBLE_EQ(t.ratio, 2.0);
  EXPECT_DOUBLE_EQ(t.lo, 1.0);
  EXPECT_DOUBLE_EQ(t.hi, 3.0);
  // Seeded: the same inputs give the same interval; the point inside it.
  const std::vector<double> num = {0.1, 0.4, 0.2, 0.9, 0.3, 0.5, 0.05, 0.7};
  const std::vector<double> den = {0.2, 0.1, 0.3, 0.3, 0.2, 0.4, 0.1, 0.2};
  const RatioInterval a = BootstrapRatio(num, den), b = BootstrapRatio(num, den);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_LT(a.lo, a.ratio);
  EXPECT_GT(a.hi, a.ratio);
  EXPECT_NEAR(a.ratio, 3.15 / 1.8, 1e-12);
}

TEST(QualityBenchTest, BadOptionsAreRefusedByName) {
  const std::string model = testing::ModelsDir() + "/stories260K.gguf";
  RAGKV_REQUIRE_OR_SKIP(std::filesystem::exists(model)) << model << " not present";
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
  o.kv_codecs = {"fp4"};
  EXPECT_NE(RunQualityBench(o, out).status().message().find("unknown kv codec \"fp4\""),
            std::string::npos);
  o.kv_codecs.clear();
  o.task = "xchunk";
  o.model_path = XchunkModelPath();
  o.chunks = 1;
  EXPECT_NE(RunQualityBench(o, out).status().message().find("chunks"), std::string::npos);
}

}  // namespace
}  // namespace ragkv::blend
