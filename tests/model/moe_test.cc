// moe_test.cc: the mixture-of-experts router against a naive loop (ties,
// one expert, every expert), and the grouped MoE FFN against what it must
// equal without llama.cpp: identical experts = the dense block, and a
// prefill (rows grouped by expert, one GEMM each) = one token at a time.
// llama.cpp itself is compared in tests/llamacpp/arch_oracle_test.cc.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/internal/moe_router.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/synthetic.h"

namespace ragkv::model {
namespace {

using internal::RouteTopK;

struct Routed {
  std::vector<float> probs, weights;
  std::vector<int32_t> experts;
};
Routed Route(const std::vector<float>& logits, int n, int k) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / n;
  Routed r{std::vector<float>(logits.size()), std::vector<float>(rows * k),
           std::vector<int32_t>(rows * k)};
  RouteTopK(logits.data(), rows, n, k, r.probs.data(), r.experts.data(), r.weights.data());
  return r;
}

// Naive: softmax in double, experts sorted by (probability desc, index asc),
// the first k renormalised.
void ExpectNaive(const std::vector<float>& logits, int n, int k) {
  const Routed got = Route(logits, n, k);
  const int64_t rows = static_cast<int64_t>(logits.size()) / n;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.data() + r * n;
    std::vector<double> p(n);
    double sum = 0;
    for (int e = 0; e < n; ++e) sum += p[e] = std::exp(double(x[e]));
    for (double& v : p) v /= sum;
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return p[a] > p[b]; });
    double top = 0;
    for (int i = 0; i < k; ++i) top += p[idx[i]];
    for (int e = 0; e < n; ++e) EXPECT_NEAR(got.probs[r * n + e], p[e], 1e-6) << r << " " << e;
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(got.experts[r * k + i], idx[i]) << "row " << r << " pick " << i;
      EXPECT_NEAR(got.weights[r * k + i], p[idx[i]] / top, 1e-6) << "row " << r << " pick " << i;
    }
  }
}

TEST(MoeRouterTest, MatchesANaiveLoop) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 2);
  for (int n : {4, 8, 60, 128}) {
    for (int k : {1, 2, n / 2, n}) {
      std::vector<float> logits(40 * n);
      for (float& x : logits) x = nd(rng);
      ExpectNaive(logits, n, k);
    }
  }
}

TEST(MoeRouterTest, TiesGoToTheLowerExpert) {
  // Equal logits everywhere: experts 0..k-1, weights 1/k.
  for (int k : {1, 3, 8}) {
    const Routed r = Route(std::vector<float>(8, 0.5f), 8, k);
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(r.experts[i], i);
      EXPECT_NEAR(r.weights[i], 1.0f / k, 1e-7);
    }
  }
  // A tie at the k-th place: the lower of the tied experts is picked.
  const std::vector<float> logits = {1, 3, 2, 3, 2, 0};
  EXPECT_EQ(Route(logits, 6, 1).experts, (std::vector<int32_t>{1}));
  EXPECT_EQ(Route(logits, 6, 2).experts, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(Route(logits, 6, 3).experts, (std::vector<int32_t>{1, 3, 2}));
  ExpectNaive(logits, 6, 3);
  ExpectNaive(logits, 6, 4);
}

TEST(MoeRouterTest, OneExpertWeighsOneAndAllExpertsWeighTheirProbabilities) {
  const std::vector<float> logits = {0.3f, -1.0f, 2.0f, 0.7f, 0.1f, 1.5f, -0.2f, 0.0f};
  const Routed one = Route(logits, 8, 1);
  EXPECT_EQ(one.experts[0], 2);
  EXPECT_EQ(one.weights[0], 1.0f);
  const Routed all = Route(logits, 8, 8);
  float sum = 0;
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(all.weights[i], all.probs[all.experts[i]], 1e-6);
    if (i > 0) {
      EXPECT_GE(all.probs[all.experts[i - 1]], all.probs[all.experts[i]]);
    }
    sum += all.weights[i];
  }
  EXPECT_NEAR(sum, 1.0f, 1e-6);
}

// MoeParts: the synthetic dense model's parts turned into a MoE of
// `n` experts, `k` used: expert e = the dense FFN, plus `spread` times
// noise of its own when spread > 0; a random router.
ModelParts MoeParts(const ModelParts& dense, int n, int k, float spread) {
  ModelParts p = dense;
  p.config.n_experts = n;
  p.config.n_experts_used = k;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  const float rs = 1.0f / std::sqrt(float(p.config.dim));
  for (LayerWeights& w : p.weights.layers) {
    w.router.resize(size_t(n) * p.config.dim);
    for (float& x : w.router) x = 4 * rs * nd(rng);
    for (auto [from, to] : {std::pair{&w.w_gate, &w.x_gate}, {&w.w_up, &w.x_up}, {&w.w_down, &w.x_down}}) {
      to->clear();
      for (int e = 0; e < n; ++e) {
        for (float x : *from) to->push_back(x * (1 + spread * nd(rng)));
      }
      from->clear();
    }
  }
  return p;
}

std::vector<float> PrefillLogits(const Model& m, const std::vector<int32_t>& toks) {
  auto kv = m.NewCache(64);
  Workspace ws;
  std::vector<float> l(toks.size() * m.config().vocab_size);
  EXPECT_TRUE(m.Prefill(toks, &*kv, &ws, LogitsMode::kAll, l.data()).ok());
  return l;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

class MoeModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto spec = ParseSyntheticSpec("layers=2,dim=64,heads=4,kv_heads=2,ffn=96,vocab=280,ctx=64,seed=5");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto parts = MakeSyntheticParts(*spec);
    ASSERT_TRUE(parts.ok()) << parts.status();
    dense_ = *std::move(parts);
    for (int i = 0; i < 24; ++i) toks_.push_back(3 + (i * 41) % 270);
  }
  std::unique_ptr<Model> Make(const ModelParts& p) {
    auto m = Model::Create(p.config, p.weights);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }
  ModelParts dense_;
  std::vector<int32_t> toks_;
};

// Renormalised weights sum to 1, so identical experts give the dense FFN
// whichever experts the router picks (k = 1, 2, all).
TEST_F(MoeModelTest, IdenticalExpertsEqualTheDenseBlock) {
  auto dense = Make(dense_);
  ASSERT_NE(dense, nullptr);
  const std::vector<float> want = PrefillLogits(*dense, toks_);
  for (int k : {1, 2, 4}) {
    auto moe = Make(MoeParts(dense_, 4, k, 0));
    ASSERT_NE(moe, nullptr);
    EXPECT_LT(MaxDiff(PrefillLogits(*moe, toks_), want), 1e-4) << "k = " << k;
    EXPECT_NE(moe->fingerprint(), dense->fingerprint());
  }
}

// Distinct experts: the grouped prefill equals decoding one token at a
// time (every expert's GEMM over one row), and differs from the dense
// model (the experts and the routing matter).
TEST_F(MoeModelTest, GroupedPrefillEqualsTokenByToken) {
  for (int k : {1, 2, 4}) {
    auto moe = Make(MoeParts(dense_, 4, k, 0.5f));
    ASSERT_NE(moe, nullptr);
    const std::vector<float> all = PrefillLogits(*moe, toks_);
    auto kv = moe->NewCache(64);
    Workspace ws;
    const int vocab = moe->config().vocab_size;
    std::vector<float> one(vocab), steps;
    for (int32_t t : toks_) {
      ASSERT_TRUE(moe->DecodeStep(t, &*kv, &ws, one.data()).ok());
      steps.insert(steps.end(), one.begin(), one.end());
    }
    EXPECT_LT(MaxDiff(all, steps), 1e-4) << "k = " << k;
    auto dense = Make(dense_);
    EXPECT_GT(MaxDiff(all, PrefillLogits(*dense, toks_)), 1e-2) << "k = " << k;
  }
}

TEST_F(MoeModelTest, CreateRefusesMissingOrMixedExpertWeights) {
  ModelParts p = MoeParts(dense_, 4, 2, 0);
  p.weights.layers[1].x_down.pop_back();
  auto m = Model::Create(p.config, p.weights);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("layers.1.x_down"), std::string::npos) << m.status();
  p = MoeParts(dense_, 4, 2, 0);
  p.weights.layers[0].w_up = dense_.weights.layers[0].w_up;
  m = Model::Create(p.config, p.weights);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("dense FFN and experts"), std::string::npos) << m.status();
  p = MoeParts(dense_, 4, 5, 0);
  EXPECT_FALSE(Model::Create(p.config, p.weights).ok());
}

}  // namespace
}  // namespace ragkv::model
