// parts.h: what a loader produces before Model::Create -- the format, the
// load options and ModelParts (config + weights). Split from loader.h so the
// producers (the per-format readers, synthetic.h) need not include the
// loader facade that calls them.
#ifndef RAGKV_MODEL_PARTS_H_
#define RAGKV_MODEL_PARTS_H_

#include "kernels/tensor.h"
#include "model/config.h"
#include "model/weights.h"

namespace ragkv::model {

enum class ModelFormat { kLlama2c, kGguf, kSafetensors, kSynthetic };
const char* ModelFormatName(ModelFormat f);

struct LoadOptions {
  // Overrides the context length from the file when > 0 (e.g. the GGUF of
  // stories260K says 2048 while it was trained at 512).
  int max_seq_len = 0;
  // KV dtype recorded in the config (and so in the fingerprint).
  kernels::DType kv_dtype = kernels::DType::kF16;
  // GGUF: keep weight matrices in the file's encoding (views of the mapped
  // file, so RSS ~ the file's size); false widens them to f32 at load.
  bool keep_encoding = true;
};

// ModelParts: a validated config and its weights, before Model::Create.
struct ModelParts {
  ModelConfig config;
  ModelWeights weights;
  ModelFormat format = ModelFormat::kLlama2c;
};

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_PARTS_H_
