#include "model/sampler.h"

#include <algorithm>
#include <cmath>

namespace ragkv::model {

int32_t Argmax(const float* x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

int32_t SampleTopP(float* logits, int32_t n, float temperature, float top_p, float coin,
                   SampleScratch* scratch) {
  if (n <= 0) return 0;
  if (temperature <= 0.0f) return Argmax(logits, n);
  // Softmax of logits / T.
  float mx = -INFINITY;
  for (int32_t i = 0; i < n; ++i) {
    logits[i] /= temperature;
    mx = std::max(mx, logits[i]);
  }
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) {
    logits[i] = std::exp(logits[i] - mx);
    sum += logits[i];
  }
  for (int32_t i = 0; i < n; ++i) logits[i] = static_cast<float>(logits[i] / sum);
  const float p = top_p;
  if (p <= 0.0f || p >= 1.0f || n == 1) {
    float cdf = 0;
    for (int32_t i = 0; i < n; ++i) {
      cdf += logits[i];
      if (coin < cdf) return i;
    }
    return n - 1;
  }
  // Top-p: candidates with prob >= (1-p)/(n-1) (no smaller one can be in
  // the nucleus), sorted by descending prob (ties by id), truncated where
  // the cumulative mass first exceeds p.
  SampleScratch local;
  SampleScratch& candidates = scratch != nullptr ? *scratch : local;
  const float cutoff = (1.0f - p) / static_cast<float>(n - 1);
  candidates.clear();
  for (int32_t i = 0; i < n; ++i) {
    if (logits[i] >= cutoff) candidates.emplace_back(logits[i], i);
  }
  if (candidates.empty()) return Argmax(logits, n);
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  float cum = 0;
  size_t last = candidates.size() - 1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    cum += candidates[i].first;
    if (cum > p) {
      last = i;
      break;
    }
  }
  const float r = coin * cum;
  float cdf = 0;
  for (size_t i = 0; i <= last; ++i) {
    cdf += candidates[i].first;
    if (r < cdf) return candidates[i].second;
  }
  return candidates[last].second;
}

Sampler::Sampler(const SamplerOptions& options)
    : options_(options), state_(options.seed == 0 ? 0x2545F4914F6CDD1Dull : options.seed) {}

float Sampler::NextFloat() {
  // llama2.c random_u32 / random_f32.
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  const uint32_t u = static_cast<uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  return static_cast<float>(u >> 8) / 16777216.0f;
}

int32_t Sampler::Sample(float* logits, int32_t n) {
  if (n <= 0) return 0;
  if (options_.temperature <= 0.0f) return Argmax(logits, n);
  return SampleTopP(logits, n, options_.temperature, options_.top_p, NextFloat(), &candidates_);
}

}  // namespace ragkv::model
