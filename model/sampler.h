// sampler.h: next-token selection: greedy, or temperature + top-p (nucleus)
// sampling with a seeded generator — the algorithm and xorshift generator of
// llama2.c's run.c, so a seed reproduces its samples.
// Sampler is stateful (its RNG): one per sequence; not thread-safe.
#ifndef RAGKV_MODEL_SAMPLER_H_
#define RAGKV_MODEL_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace ragkv::model {

struct SamplerOptions {
  // 0 = greedy (argmax, lowest id on ties). Otherwise logits are divided by
  // it before the softmax.
  float temperature = 0.0f;
  // Nucleus mass in (0, 1); values outside that range sample the full
  // distribution. Default 0.9 (llama2.c).
  float top_p = 0.9f;
  // RNG seed; 0 is mapped to a fixed non-zero constant (xorshift needs one).
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  // Sample: the next id given `logits` [n] (modified in place when
  // temperature > 0: they become probabilities).
  int32_t Sample(float* logits, int32_t n);

 private:
  float NextFloat();
  SamplerOptions options_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// Argmax: the index of the largest value, lowest index on ties.
int32_t Argmax(const float* x, int32_t n);

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_SAMPLER_H_
