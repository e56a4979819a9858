// sampler.h: next-token selection: greedy, or temperature + top-p (nucleus)
// sampling with a seeded generator — the algorithm and xorshift generator of
// llama2.c's run.c, so a seed reproduces its samples.
// Sampler is stateful (its RNG): one per sequence; not thread-safe. The free
// functions are pure (thread-safe on distinct buffers).
#ifndef RAGKV_MODEL_SAMPLER_H_
#define RAGKV_MODEL_SAMPLER_H_

#include <cstdint>
#include <utility>
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

// Scratch of SampleTopP: (probability, id) candidates, reused between calls.
using SampleScratch = std::vector<std::pair<float, int32_t>>;

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  // Sample: the next id given `logits` [n] (modified in place when
  // temperature > 0: they become probabilities). Draws one number from the
  // RNG when temperature > 0, none when greedy.
  int32_t Sample(float* logits, int32_t n);

 private:
  float NextFloat();
  SamplerOptions options_;
  uint64_t state_;
  SampleScratch candidates_;
};

// Argmax: the index of the largest value of x [n], lowest index on ties
// (the same index as std::max_element); 0 when n <= 0.
int32_t Argmax(const float* x, int32_t n);

// SampleTopP: one draw of temperature + top-p sampling from `logits` [n]
// with the uniform number `coin` in [0, 1) (the caller owns the RNG) —
// llama2.c's sample / sample_topp, in f32:
//  - temperature <= 0: Argmax(logits), coin unused, logits unchanged;
//  - otherwise logits become softmax(logits / temperature) in place; with
//    top_p outside (0, 1) (or n == 1) the id is the first whose cumulative
//    probability exceeds coin; else the candidates are sorted by descending
//    probability (ties: lower id first), cut after the first whose
//    cumulative mass exceeds top_p, and the id is the first whose
//    cumulative mass exceeds coin times the kept mass.
// A -inf logit has probability 0 and is never drawn (callers ban ids that
// way). `scratch` may be null (a local one is used). n <= 0 returns 0.
int32_t SampleTopP(float* logits, int32_t n, float temperature, float top_p, float coin,
                   SampleScratch* scratch = nullptr);

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_SAMPLER_H_
