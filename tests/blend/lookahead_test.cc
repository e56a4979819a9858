// The query look-ahead of the `lookahead-deviation` selector (blend/
// internal/lookahead.h) against a naive reference. Over full prefill's own
// cache the look-ahead's query rows are full prefill's, so its mass at each
// layer must be the attention full prefill's query rows put on each context
// row: here every row is carried through the layers (ForwardLayer over all
// rows, what Prefill composes) and the mass is a plain softmax loop.
#include "blend/internal/lookahead.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "blend_test_util.h"
#include "model/synthetic.h"

namespace ragkv::blend {
namespace {

using kernels::DType;
using kernels::TensorView;

struct Truth {
  model::KVCache cache;
  std::vector<std::vector<double>> mass;  // [layer][context row]
};

// NaiveTruth: full prefill's cache, and per layer the query rows' (>= qb)
// attention mass on the context rows (< qb): softmax over those keys that
// the layer lets the row see (its sliding window), at the model's logit
// scale, summed over rows and heads.
Truth NaiveTruth(const model::Model& m, const std::vector<int32_t>& tokens, int64_t qb) {
  const model::ModelConfig& cfg = m.config();
  const int64_t n = static_cast<int64_t>(tokens.size()), dim = cfg.dim, hd = cfg.head_dim;
  const int64_t nq = n - qb;
  auto cache = m.NewCache(n);
  EXPECT_TRUE(cache.ok());
  EXPECT_TRUE(cache->set_num_tokens(n).ok());
  std::vector<float> h(n * dim), q(nq * cfg.q_dim());
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  model::Workspace ws;
  EXPECT_TRUE(m.Embed(tokens, TensorView::Contiguous(h.data(), DType::kF32, {n, dim})).ok());
  Truth t{std::move(*cache), std::vector<std::vector<double>>(cfg.n_layers, std::vector<double>(qb))};
  const int group = cfg.n_heads / cfg.n_kv_heads;
  for (int l = 0; l < cfg.n_layers; ++l) {
    EXPECT_TRUE(m.ProjectQ(l, TensorView::Contiguous(h.data() + qb * dim, DType::kF32, {nq, dim}),
                           pos.data() + qb,
                           TensorView::Contiguous(q.data(), DType::kF32, {nq, cfg.q_dim()}), &ws)
                    .ok());
    EXPECT_TRUE(m.ForwardLayer(l, TensorView::Contiguous(h.data(), DType::kF32, {n, dim}),
                               pos.data(), t.cache.Layer(l, n), {}, &ws)
                    .ok());
    const float* k = t.cache.k_data(l);
    for (int64_t r = 0; r < nq; ++r) {
      for (int hh = 0; hh < cfg.n_heads; ++hh) {
        const float* qv = q.data() + (r * cfg.n_heads + hh) * hd;
        const float* kh = k + (hh / group) * t.cache.capacity_tokens() * hd;
        const double scale = cfg.attn_scale > 0 ? cfg.attn_scale : 1 / std::sqrt(double(hd));
        const int w = cfg.Window(l);
        const auto seen = [&](int64_t j) { return w == 0 || qb + r - j < w; };
        std::vector<double> logit(qb);
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j < qb; ++j) {
          double d = 0;
          for (int64_t x = 0; x < hd; ++x) d += double(qv[x]) * kh[j * hd + x];
          logit[j] = d * scale;
          if (seen(j)) mx = std::max(mx, logit[j]);
        }
        for (int64_t j = 0; j < qb; ++j) z += seen(j) ? std::exp(logit[j] - mx) : 0;
        for (int64_t j = 0; j < qb; ++j) {
          if (seen(j)) t.mass[l][j] += std::exp(logit[j] - mx) / z;
        }
      }
    }
  }
  return t;
}

// SlidingModel: SmallModel's shape with Gemma 3's attention: every other
// layer sees the last 5 keys only, and a logit scale that is not
// 1/sqrt(head_dim).
std::unique_ptr<model::Model> SlidingModel() {
  auto spec = model::ParseSyntheticSpec("layers=4,dim=64,heads=4,kv_heads=2,ffn=128,vocab=300,ctx=512,seed=7");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->config.kv_dtype = DType::kF32;
  spec->config.sliding_window = 5;
  spec->config.swa_pattern = 2;
  spec->config.rope_theta_swa = 10000.0f;
  spec->config.attn_scale = 0.2f;
  auto m = model::MakeSyntheticModel(*spec);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(m).value();
}

// QueryRows: the prompt's rows < qb are the candidates, the rest the query
// rows, with their embeddings (their input to layer 0).
struct QueryRows {
  std::vector<int32_t> qpos, cand;
  std::vector<float> hidden;
};
QueryRows SplitAt(const model::Model& m, const std::vector<int32_t>& tokens, int64_t qb) {
  QueryRows q;
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < n; ++i) (i < qb ? q.cand : q.qpos).push_back(static_cast<int32_t>(i));
  q.hidden.resize((n - qb) * m.config().dim);
  std::vector<int32_t> qtok(tokens.begin() + qb, tokens.end());
  EXPECT_TRUE(
      m.Embed(qtok, TensorView::Contiguous(q.hidden.data(), DType::kF32, {n - qb, m.config().dim}))
          .ok());
  return q;
}

class QueryLookahead : public ::testing::TestWithParam<bool> {};

TEST_P(QueryLookahead, OverFullPrefillsCacheItIsFullPrefillsQueryAttention) {
  const auto m = GetParam() ? SlidingModel() : testing::SmallModel();
  ASSERT_EQ(m->config().Window(0), GetParam() ? 5 : 0);
  std::mt19937 rng(11);
  const std::vector<int32_t> tokens = testing::RandomTokens(&rng, 40, m->config().vocab_size);
  const int64_t n = 40, qb = 34, L = m->config().n_layers;
  Truth t = NaiveTruth(*m, tokens, qb);
  const std::vector<float> before(t.cache.k_data(0), t.cache.k_data(0) + t.cache.capacity_tokens());
  const QueryRows rows = SplitAt(*m, tokens, qb);
  const std::vector<int32_t>&qpos = rows.qpos, &cand = rows.cand;
  const std::vector<float>& qh = rows.hidden;
  internal::QueryLookahead la;
  model::Workspace ws;
  ASSERT_TRUE(la.Run(*m, 0, qh, qpos, t.cache, n, qb, cand, kernels::CausalMode::kExact,
                     [](int) { return absl::OkStatus(); }, &ws)
                  .ok());
  ASSERT_TRUE(la.ran());
  std::vector<float> after_prev(qb), after(qb);
  for (int l = 0; l + 1 < L; ++l) {
    la.After(l, cand, after.data());
    if (l > 0) {
      for (int64_t j = 0; j < qb; ++j) {
        // The mass at layer l = the sum after l-1 less the sum after l.
        EXPECT_NEAR(after_prev[j] - after[j], t.mass[l][j], 2e-4 * (1 + t.mass[l][j]))
            << "layer " << l << " row " << j;
      }
    }
    after_prev = after;
  }
  for (int64_t j = 0; j < qb; ++j) EXPECT_NEAR(after_prev[j], t.mass[L - 1][j], 2e-4);
  // Only the query rows' K/V were written: the context rows are untouched.
  for (size_t i = 0; i < before.size(); ++i) {
    if (static_cast<int64_t>(i) / m->config().head_dim < qb) ASSERT_EQ(before[i], t.cache.k_data(0)[i]);
  }
  // After the last layer there is nothing to look at.
  la.After(static_cast<int>(L - 1), cand, after.data());
  for (int64_t j = 0; j < qb; ++j) EXPECT_EQ(after[j], 0.0f);
}

TEST_P(QueryLookahead, AHorizonWaitsOnlyForItsLayersAndAdvanceCompletesTheRun) {
  const auto m = GetParam() ? SlidingModel() : testing::SmallModel();
  std::mt19937 rng(12);
  const std::vector<int32_t> tokens = testing::RandomTokens(&rng, 40, m->config().vocab_size);
  const int64_t n = 40, qb = 34;
  const int L = m->config().n_layers;
  ASSERT_GE(L, 4);
  Truth t = NaiveTruth(*m, tokens, qb);
  const QueryRows rows = SplitAt(*m, tokens, qb);
  const std::vector<int32_t>&qpos = rows.qpos, &cand = rows.cand;
  const std::vector<float>& qh = rows.hidden;
  model::Workspace ws;
  internal::QueryLookahead full, near;
  int waited = -1;
  const auto wait = [&waited](int l) {
    waited = std::max(waited, l);
    return absl::OkStatus();
  };
  ASSERT_TRUE(
      full.Run(*m, 0, qh, qpos, t.cache, n, qb, cand, kernels::CausalMode::kExact, wait, &ws).ok());
  EXPECT_EQ(waited, L - 1);
  waited = -1;
  // Horizon 1 from layer 0: layer 1's mass only, and no wait past layer 1.
  ASSERT_TRUE(near.Run(*m, 0, qh, qpos, t.cache, n, qb, cand, kernels::CausalMode::kExact, wait,
                       &ws, /*horizon=*/1)
                  .ok());
  EXPECT_EQ(waited, 1);
  EXPECT_EQ(near.reached(), 1);
  std::vector<float> a(qb), b(qb);
  near.After(0, cand, a.data());
  for (int64_t j = 0; j < qb; ++j) EXPECT_NEAR(a[j], t.mass[1][j], 2e-4 * (1 + t.mass[1][j])) << j;
  // A check at layer 1 looks one layer further; its own attention is what
  // weighs where nothing after it is reached yet.
  near.After(1, cand, a.data());
  for (int64_t j = 0; j < qb; ++j) EXPECT_EQ(a[j], 0.0f);
  std::vector<float> dev(qb, 2.0f), att(qb, 0.5f);
  near.Weigh(1, att, cand, dev.data());
  for (int64_t j = 0; j < qb; ++j) EXPECT_EQ(dev[j], 1.0f);
  ASSERT_TRUE(near.LookFrom(1, &ws).ok());
  EXPECT_EQ(near.reached(), 2);
  EXPECT_EQ(waited, 2);
  // Advanced to the end over the same cache, it is the full run.
  ASSERT_TRUE(near.Advance(L - 1, &ws).ok());
  for (int l = 0; l < L; ++l) {
    full.After(l, cand, a.data());
    near.After(l, cand, b.data());
    for (int64_t j = 0; j < qb; ++j) EXPECT_NEAR(a[j], b[j], 1e-5 * (1 + a[j])) << l << " " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, QueryLookahead, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "SlidingWindowAndScale" : "Plain"; });

}  // namespace
}  // namespace ragkv::blend
