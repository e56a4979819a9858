// RunGenerate / Generate edge cases, the sampler, and the prefill bench.
#include <cmath>
#include <map>

#include "bench/model/bench_prefill.h"
#include "model/generate.h"
#include "model/sampler.h"
#include "tests/model/test_util.h"

namespace ragkv::model {
namespace {

using ::ragkv::model::testing::ModelFile;

TEST(GenerateTest, ErrorsAreClearAndPrintNothing) {
  GenerateOptions o;
  std::ostringstream out;
  EXPECT_FALSE(RunGenerate(o, out).ok());  // no model
  o.model_path = "synthetic:layers=1,dim=32,heads=2,ffn=48,vocab=300,ctx=16";
  EXPECT_FALSE(RunGenerate(o, out).ok());  // no prompt
  o.prompt = std::string(40, 'a');         // 41 tokens with BOS > ctx 16
  o.max_new = 4;
  absl::Status s = RunGenerate(o, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("exceeds the model context of 16"), std::string::npos) << s;
  EXPECT_NE(s.message().find(o.model_path), std::string::npos) << s;
  EXPECT_TRUE(out.str().empty());
  // A bad id.
  o.prompt.clear();
  o.prompt_ids = {1, 5000};
  o.print_ids = true;
  s = RunGenerate(o, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // llama2.c .bin without a tokenizer: ids work, text needs --tokenizer.
  if (::ragkv::model::testing::HaveModelFile("stories260K.bin")) {
    GenerateOptions b;
    b.model_path = ModelFile("stories260K.bin");
    b.prompt_ids = {1};
    b.max_new = 3;
    b.print_ids = true;
    std::ostringstream ids;
    ASSERT_TRUE(RunGenerate(b, ids).ok());
    EXPECT_EQ(ids.str(), "403,407,261\n");
    b.print_ids = false;
    EXPECT_EQ(RunGenerate(b, ids).code(), absl::StatusCode::kNotFound);
  }
}

TEST(GenerateTest, StopsAtContextAndStopIds) {
  auto o = GenerateOptions{};
  o.model_path = "synthetic:layers=1,dim=32,heads=2,ffn=48,vocab=300,ctx=10";
  o.prompt_ids = {1, 2, 3};
  o.max_new = 100;
  o.print_ids = true;
  o.stop_at_eos = false;
  std::ostringstream out;
  ASSERT_TRUE(RunGenerate(o, out).ok());
  // Context 10, prompt 3: 7 more tokens fit in the cache, and the token
  // sampled from the last slot's logits is returned too: 8 new tokens.
  const std::string s = out.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), ','), 7) << s;
}

TEST(GenerateTest, ParseIdList) {
  auto a = ParseIdList("1, 2,3");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(ParseIdList("1,x").ok());
  EXPECT_FALSE(ParseIdList("").ok());
}

TEST(SamplerTest, GreedySeededAndTopP) {
  std::vector<float> logits = {0.1f, 2.0f, 2.0f, -1.0f};
  Sampler g(SamplerOptions{});
  EXPECT_EQ(g.Sample(logits.data(), 4), 1);  // lowest id on ties
  // Same seed -> same samples; the distribution follows softmax(l/T).
  auto draw = [](uint64_t seed, float top_p) {
    Sampler s(SamplerOptions{1.0f, top_p, seed});
    std::map<int, int> counts;
    for (int i = 0; i < 20000; ++i) {
      std::vector<float> l = {0.0f, std::log(2.0f), std::log(4.0f), -20.0f};
      ++counts[s.Sample(l.data(), 4)];
    }
    return counts;
  };
  auto a = draw(42, 0.0f), b = draw(42, 0.0f);
  EXPECT_EQ(a, b);
  EXPECT_NEAR(a[0] / 20000.0, 1.0 / 7, 0.02);
  EXPECT_NEAR(a[2] / 20000.0, 4.0 / 7, 0.02);
  // top-p 0.5: only the 4/7 token is in the nucleus.
  auto c = draw(1, 0.5f);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.begin()->first, 2);
}

TEST(BenchPrefillTest, TinyRunReportsSaneFigures) {
  PrefillBenchOptions o;
  o.model = "synthetic:layers=1,dim=32,heads=2,ffn=48,vocab=300,ctx=8";
  o.tokens = {8, 32};  // longer than ctx: the bench raises the context
  o.repeats = 1;
  o.sgemm_n = 64;
  auto r = RunPrefillBench(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_GT(r->sgemm_gflops, 0);
  for (const auto& row : r->rows) {
    EXPECT_GT(row.tokens_per_s, 0);
    EXPECT_GT(row.fraction, 0);
  }
  std::ostringstream out;
  PrintPrefillBench(*r, out);
  EXPECT_NE(out.str().find("sgemm ceiling"), std::string::npos);
  o.tokens = {};
  EXPECT_FALSE(RunPrefillBench(o).ok());
}

}  // namespace
}  // namespace ragkv::model
