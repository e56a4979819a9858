// loader.h: loading models and tokenizers from files, with format detection.
//
// Formats (docs/model.md):
//  * llama2.c legacy v0 checkpoint (.bin): 7 int32 header (dim, hidden_dim,
//    n_layers, n_heads, n_kv_heads, vocab_size (negative = unshared
//    classifier), seq_len), then f32 weights in llama2.c's order;
//  * GGUF v2/v3, architecture llama, F32/F16 tensors; hyperparameters from
//    metadata (its tokenizer is embedded: LoadTokenizer(gguf_path));
//  * Hugging Face: a directory with config.json and model.safetensors or
//    model.safetensors.index.json (+ shards), or the path of one
//    .safetensors / config.json inside it; F32/F16/BF16;
//    LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM names;
//  * "synthetic:<spec>" (see synthetic.h).
// Every size is checked against the file length before it is read; errors
// are InvalidArgument / Unimplemented / NotFound naming the file and the
// problem. Files are mmapped read-only and converted to f32.
// Thread-safe (no shared state).
#ifndef RAGKV_MODEL_LOADER_H_
#define RAGKV_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/model.h"
#include "model/parts.h"
#include "model/tokenizer.h"
#include "model/weights.h"

namespace ragkv::model {

// DetectModelFormat: by "synthetic:" prefix, directory (config.json),
// extension (.bin, .gguf, .safetensors, .json) or, failing that, magic
// ("GGUF"). NotFound if the path does not exist.
absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path);

// LoadModelParts: reads config + weights (no fusing, no fingerprint).
absl::StatusOr<ModelParts> LoadModelParts(const std::string& path,
                                          const LoadOptions& options = {});

// LoadModel: LoadModelParts + Model::Create.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path,
                                                 const LoadOptions& options = {});

// LoadTokenizer: by format:
//  * .gguf: the vocabulary embedded in its metadata (tokenizer.ggml.*,
//    model "llama");
//  * .model: SentencePiece ModelProto through libsentencepiece;
//  * .json: Hugging Face tokenizer.json (byte-level BPE);
//  * .bin: llama2.c tokenizer.bin;
//  * a directory: tokenizer.json, else tokenizer.model inside it;
//  * "byte" or "synthetic:...": the byte-level tokenizer.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

// DefaultTokenizerPath: the tokenizer that comes with a model path when
// none is given: the GGUF itself, the HF directory, "byte" for synthetic
// models; NotFound for a llama2.c .bin (it needs --tokenizer).
absl::StatusOr<std::string> DefaultTokenizerPath(const std::string& model_path);

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_LOADER_H_
