// synthetic.h: seeded synthetic Llama models of any shape, for benchmarks at
// realistic sizes without a checkpoint.
//
// Spec: "layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000"
// plus optional ",seed=N,theta=F,ctx=N,eps=F,head_dim=N". Weights are drawn
// from a portable generator (SplitMix64 + Box-Muller), so a given spec gives
// bit-identical weights (and fingerprint) on every machine: matrices
// N(0, 1/fan_in) (std 1/sqrt(fan_in)), embeddings N(0, 1), norms 1.
// Thread-safe (pure functions).
#ifndef RAGKV_MODEL_SYNTHETIC_H_
#define RAGKV_MODEL_SYNTHETIC_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/parts.h"
#include "model/model.h"

namespace ragkv::model {

struct SyntheticSpec {
  ModelConfig config;  // validated; arch "llama", interleaved RoPE, untied classifier
  uint64_t seed = 0;
};

// ParseSyntheticSpec: InvalidArgument for unknown keys, malformed numbers or
// an invalid resulting config. Defaults: ctx=4096, theta=10000, eps=1e-5,
// seed=0; layers, dim, heads, ffn and vocab are required; kv_heads
// defaults to heads.
absl::StatusOr<SyntheticSpec> ParseSyntheticSpec(const std::string& spec);

// MakeSyntheticParts / MakeSyntheticModel: the weights for `spec`.
absl::StatusOr<ModelParts> MakeSyntheticParts(const SyntheticSpec& spec);
absl::StatusOr<std::unique_ptr<Model>> MakeSyntheticModel(const SyntheticSpec& spec);

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_SYNTHETIC_H_
