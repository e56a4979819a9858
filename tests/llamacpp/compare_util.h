// compare_util.h: comparing ragkv's logits and greedy continuations with
// llama.cpp's (tests/llamacpp), with the router's near ties of a
// mixture-of-experts model. Header-only.
#ifndef RAGKV_TESTS_LLAMACPP_COMPARE_UTIL_H_
#define RAGKV_TESTS_LLAMACPP_COMPARE_UTIL_H_

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "gtest/gtest.h"
#include "model/generate.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"

namespace ragkv::model::testing {

// Agreement: max |a - b|, b's logit range, and the share of rows whose
// argmax agrees.
struct Agreement {
  double max_abs = 0, range = 0, top1 = 0;
};

inline Agreement CompareLogits(const std::vector<float>& a, const std::vector<float>& b, int vocab) {
  Agreement g;
  float lo = 1e30f, hi = -1e30f;
  int same = 0;
  const size_t rows = a.size() / vocab;
  for (size_t r = 0; r < rows; ++r) {
    const float* x = a.data() + r * vocab;
    const float* y = b.data() + r * vocab;
    for (int j = 0; j < vocab; ++j) {
      g.max_abs = std::max(g.max_abs, double(std::abs(x[j] - y[j])));
      lo = std::min(lo, y[j]);
      hi = std::max(hi, y[j]);
    }
    same += model::Argmax(x, vocab) == model::Argmax(y, vocab);
  }
  g.range = hi - lo;
  g.top1 = double(same) / rows;
  return g;
}

// RagkvLogits: the logits of every position of a prefill of `toks`.
inline std::vector<float> RagkvLogits(const Model& m, const std::vector<int32_t>& toks) {
  auto kv = m.NewCache(static_cast<int>(toks.size()) + 8);
  Workspace ws;
  std::vector<float> l(toks.size() * m.config().vocab_size);
  EXPECT_TRUE(m.Prefill(toks, &*kv, &ws, LogitsMode::kAll, l.data()).ok());
  return l;
}

// RagkvGreedy: `n` greedy tokens after `prompt` (model::Generate with
// model::Argmax: lowest id on ties).
inline std::vector<int32_t> RagkvGreedy(const Model& m, const std::vector<int32_t>& prompt, int n) {
  absl::StatusOr<std::vector<int32_t>> out = Generate(m, prompt, n, model::Argmax);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<int32_t>{};
}

// RoutedRun: ragkv's teacher-forced logits of `toks` ([T, vocab], the
// layer-level composition Prefill runs) and, per position, the smallest
// gap over layers between the router's k-th and (k+1)-th probabilities
// (+inf for a dense model or k = n_experts). Where that gap is below the
// comparison's tie tolerance, two engines may route the token to different
// experts (docs/model.md "Mixture of experts": the tie rule).
struct RoutedRun {
  std::vector<float> logits, min_gap;
};
inline RoutedRun RagkvRoutedRun(const Model& m, const std::vector<int32_t>& toks) {
  const ModelConfig& c = m.config();
  const int64_t t = static_cast<int64_t>(toks.size());
  RoutedRun run;
  run.min_gap.assign(t, INFINITY);
  run.logits.assign(t * c.vocab_size, 0);
  auto cache = m.NewCache(t);
  Workspace ws;
  std::vector<float> hidden(t * c.dim), probs(t * std::max(c.n_experts, 1));
  std::vector<int32_t> pos(t);
  for (int64_t i = 0; i < t; ++i) pos[i] = static_cast<int32_t>(i);
  const auto hv = kernels::TensorView::Contiguous(hidden.data(), kernels::DType::kF32, {t, c.dim});
  EXPECT_TRUE(m.Embed(toks, hv).ok());
  for (int l = 0; l < c.n_layers; ++l) {
    LayerOptions o;
    o.router_probs = c.n_experts > 0 ? probs.data() : nullptr;
    EXPECT_TRUE(m.ForwardLayer(l, hv, pos.data(), cache->Layer(l, t), o, &ws).ok());
    if (c.n_experts == 0 || c.n_experts_used == c.n_experts) continue;
    for (int64_t i = 0; i < t; ++i) {
      std::vector<float> p(probs.begin() + i * c.n_experts, probs.begin() + (i + 1) * c.n_experts);
      std::sort(p.begin(), p.end(), std::greater<float>());
      run.min_gap[i] = std::min(run.min_gap[i], p[c.n_experts_used - 1] - p[c.n_experts_used]);
    }
  }
  EXPECT_TRUE(m.FinalNormAndLogits(hv, kernels::TensorView::Contiguous(run.logits.data(),
                                                                        kernels::DType::kF32,
                                                                        {t, c.vocab_size}),
                                   &ws)
                  .ok());
  return run;
}

// Kept: the rows of logits ([T, vocab]) whose position is not excluded.
inline std::vector<float> Kept(const std::vector<float>& logits, const std::vector<bool>& excluded,
                               int vocab) {
  std::vector<float> out;
  for (size_t r = 0; r < excluded.size(); ++r) {
    if (!excluded[r]) out.insert(out.end(), logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
  }
  return out;
}

}  // namespace ragkv::model::testing

#endif  // RAGKV_TESTS_LLAMACPP_COMPARE_UTIL_H_
