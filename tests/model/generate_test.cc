// RunGenerate / Generate edge cases, the sampler, and the prefill bench.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <utility>

#include "bench/model/bench_prefill.h"
#include "model/generate.h"
#include "model/loader.h"
#include "model/model.h"
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

// NaiveArgmax: the first index holding the maximum (two passes).
int32_t NaiveArgmax(const std::vector<float>& x) {
  float mx = x[0];
  for (float v : x) mx = std::max(mx, v);
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == mx) return static_cast<int32_t>(i);
  }
  return -1;
}

TEST(SamplerTest, ArgmaxMatchesNaiveReference) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 1 + trial % 37;
    std::uniform_int_distribution<int> level(0, trial % 3 == 0 ? 2 : 1000);  // many ties
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(level(rng)) - 500.0f;
    EXPECT_EQ(Argmax(x.data(), n), NaiveArgmax(x)) << "trial " << trial;
    EXPECT_EQ(Argmax(x.data(), n), std::max_element(x.begin(), x.end()) - x.begin());
  }
  EXPECT_EQ(Argmax(nullptr, 0), 0);
}

// NaiveTopP: the draw SampleTopP must make, in double from first principles:
// softmax(l / T), ids sorted by descending probability (lower id first on
// ties), kept up to and including the first whose cumulative mass exceeds
// top_p, and the first kept id whose cumulative mass exceeds coin * kept;
// top_p >= 1: the first id (in id order) whose cumulative mass exceeds coin.
// *margin: the distance of coin * kept, and of top_p, to the nearest
// cumulative boundary.
int32_t NaiveTopP(const std::vector<float>& logits, double temperature, double top_p,
                  double coin, double* margin) {
  const int n = static_cast<int>(logits.size());
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, l / temperature);
  std::vector<double> p(n);
  double z = 0;
  for (int i = 0; i < n; ++i) z += p[i] = std::exp(logits[i] / temperature - mx);
  for (double& v : p) v /= z;
  // top_p >= 1: the whole distribution in id order (llama2.c's sample_mult);
  // else ids by descending probability, lower id first on ties.
  std::vector<int32_t> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  if (top_p < 1) {
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  }
  size_t keep = order.size();
  double kept = 0;
  *margin = INFINITY;
  for (size_t i = 0; i < order.size(); ++i) {
    kept += p[order[i]];
    if (top_p >= 1) continue;  // no nucleus: all kept
    *margin = std::min(*margin, std::fabs(kept - top_p));
    if (kept > top_p) {
      keep = i + 1;
      break;
    }
  }
  const double r = coin * kept;
  double cdf = 0;
  int32_t pick = order[keep - 1];
  bool found = false;
  for (size_t i = 0; i < keep; ++i) {
    cdf += p[order[i]];
    *margin = std::min(*margin, std::fabs(cdf - r));
    if (!found && r < cdf) {
      pick = order[i];
      found = true;
    }
  }
  return pick;
}

TEST(SamplerTest, SampleTopPMatchesNaiveReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  int compared = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 2 + trial % 300;
    const float temperature = 0.5f + 0.25f * (trial % 5);
    const float top_p = trial % 7 == 0 ? 1.0f : 0.3f + 0.1f * (trial % 7);
    std::vector<float> logits(n);
    for (auto& l : logits) l = normal(rng);
    const float coin = unit(rng);
    double margin = 0;
    const int32_t want = NaiveTopP(logits, temperature, top_p, coin, &margin);
    std::vector<float> x = logits;
    const int32_t got = SampleTopP(x.data(), n, temperature, top_p, coin);
    // f32 sums may move a boundary by a few ulps: a coin that close is not
    // compared (1e-5 is ~100x the f32 error of these sums).
    if (margin < 1e-5) continue;
    ++compared;
    EXPECT_EQ(got, want) << "trial " << trial << " n " << n << " T " << temperature << " p "
                         << top_p << " coin " << coin;
  }
  EXPECT_GT(compared, 2900);
}

TEST(SamplerTest, SampleTopPGreedyAndBannedIds) {
  std::vector<float> l = {0.5f, 3.0f, 3.0f, -1.0f};
  const std::vector<float> before = l;
  EXPECT_EQ(SampleTopP(l.data(), 4, 0.0f, 0.9f, 0.99f), 1);  // argmax, coin unused
  EXPECT_EQ(l, before);                                      // greedy leaves logits alone
  // -inf logits are never drawn, whatever the coin and top_p.
  for (float top_p : {0.5f, 0.9f, 1.0f}) {
    for (float coin : {0.0f, 0.3f, 0.7f, 0.999999f}) {
      std::vector<float> x = {-INFINITY, 1.0f, -INFINITY, 1.5f, -INFINITY};
      const int32_t id = SampleTopP(x.data(), 5, 1.0f, top_p, coin);
      EXPECT_TRUE(id == 1 || id == 3) << top_p << " " << coin << " -> " << id;
    }
  }
  // The Sampler draws what SampleTopP draws with the Sampler's coins: two
  // samplers of one seed stay in step whether they go through SampleTopP or not.
  Sampler a(SamplerOptions{1.0f, 0.9f, 9}), b(SamplerOptions{1.0f, 0.9f, 9});
  for (int i = 0; i < 100; ++i) {
    std::vector<float> x = {0.1f * i, 1.0f, -0.5f, 0.3f}, y = x;
    EXPECT_EQ(a.Sample(x.data(), 4), b.Sample(y.data(), 4));
  }
}

// Scripted: a TokenPicker returning ids from a list, in order.
struct Scripted {
  std::vector<int32_t> ids;
  size_t next = 0;
  int32_t operator()(float*, int32_t) { return ids[next++ % ids.size()]; }
};

TEST(GenerateTest, DecodeStopsAtStopIdMaxNewAndFullCache) {
  auto model = LoadModel("synthetic:layers=1,dim=32,heads=2,ffn=48,vocab=300,ctx=32");
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> prompt = {1, 5, 7};
  auto run = [&](int64_t capacity, int max_new, std::vector<int32_t> stops) {
    auto cache = (*model)->NewCache(capacity);
    EXPECT_TRUE(cache.ok());
    Workspace ws;
    std::vector<float> logits(300);
    EXPECT_TRUE((*model)->Prefill(prompt, &*cache, &ws, LogitsMode::kLast, logits.data()).ok());
    Scripted s{{10, 11, 12, 13, 14, 15}};
    auto out = Decode(**model, &*cache, &ws, logits.data(), max_new,
                      [&s](float* l, int32_t v) { return s(l, v); }, stops);
    EXPECT_TRUE(out.ok()) << out.status();
    return std::make_pair(*out, cache->num_tokens());
  };
  // max_new: 4 tokens, the last one not forwarded.
  auto [a, na] = run(32, 4, {});
  EXPECT_EQ(a, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(na, 3 + 3);
  // A stop id is included and ends the loop.
  auto [b, nb] = run(32, 6, {12});
  EXPECT_EQ(b, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(nb, 3 + 2);
  // A full cache (5 = prompt + 2) ends it: the token picked from the last
  // row's logits is still returned.
  auto [c, nc] = run(5, 6, {});
  EXPECT_EQ(c, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(nc, 5);
  auto [d, nd] = run(32, 0, {});
  EXPECT_TRUE(d.empty());
}

TEST(GenerateTest, GreedyGenerateMatchesNaiveDecodeLoop) {
  auto model = LoadModel("synthetic:layers=2,dim=32,heads=2,ffn=48,vocab=300,ctx=40");
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const std::vector<int32_t> prompt = {1, 17, 42, 99};
  // Reference: one prefill, then argmax / DecodeStep by hand.
  auto cache = m.NewCache(4 + 12);
  ASSERT_TRUE(cache.ok());
  Workspace ws;
  std::vector<float> logits(300);
  ASSERT_TRUE(m.Prefill(prompt, &*cache, &ws, LogitsMode::kLast, logits.data()).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < 12; ++i) {
    want.push_back(NaiveArgmax(logits));
    if (i + 1 < 12) {
      ASSERT_TRUE(m.DecodeStep(want.back(), &*cache, &ws, logits.data()).ok());
    }
  }
  auto got = Generate(m, prompt, 12, SamplerOptions{});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
  auto picked = Generate(m, prompt, 12, Argmax);
  ASSERT_TRUE(picked.ok()) << picked.status();
  EXPECT_EQ(*picked, want);
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
