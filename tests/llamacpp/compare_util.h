// compare_util.h: comparing ragkv's logits and greedy continuations with
// llama.cpp's (tests/llamacpp). Header-only.
#ifndef RAGKV_TESTS_LLAMACPP_COMPARE_UTIL_H_
#define RAGKV_TESTS_LLAMACPP_COMPARE_UTIL_H_

#include <algorithm>
#include <cmath>
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

}  // namespace ragkv::model::testing

#endif  // RAGKV_TESTS_LLAMACPP_COMPARE_UTIL_H_
