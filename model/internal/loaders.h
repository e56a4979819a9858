// loaders.h: per-format readers behind model/loader.h. Internal.
#ifndef RAGKV_MODEL_INTERNAL_LOADERS_H_
#define RAGKV_MODEL_INTERNAL_LOADERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "model/internal/mapped_file.h"
#include "model/loader.h"
#include "model/tokenizer.h"

namespace ragkv::model::internal {

absl::StatusOr<ModelParts> LoadLlama2c(const std::string& path, const LoadOptions& options);
absl::StatusOr<ModelParts> LoadGguf(const std::string& path, const LoadOptions& options);
absl::StatusOr<LlamaVocab> LoadGgufVocab(const std::string& path);
// LoadGgufTokenizer: the tokenizer embedded in a GGUF: tokenizer.ggml.model
// "llama" (SentencePiece-style, LoadGgufVocab) or "gpt2" (byte-level BPE
// with tokenizer.ggml.merges and the tokenizer.ggml.pre pre-tokenizer).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path);

// GgufBpeVocab: a GGUF "gpt2" vocabulary as stored (tokens in GPT-2's
// byte-to-unicode form, token types as llama.cpp's, merges "a b").
struct GgufBpeVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;
  std::string pre;             // tokenizer.ggml.pre
  int32_t bos = -1, eos = -1, unk = -1;  // bos / eos: DecideSpecialTokens's ids
  bool add_bos = false;                   // DecideSpecialTokens's add_bos
};
// MakeGgufBpeTokenizer: Unimplemented for a pre-tokenizer it does not know
// (llama-bpe / llama3, qwen2, gpt-2 / default are known), naming it.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeGgufBpeTokenizer(const GgufBpeVocab& v,
                                                                const std::string& path);
// path: a directory, a config.json or a .safetensors inside the directory.
absl::StatusOr<ModelParts> LoadHfSafetensors(const std::string& path, const LoadOptions& options);
absl::StatusOr<LlamaVocab> LoadLlama2cVocab(const std::string& path);
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path);
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfBpeTokenizer(const std::string& path);

// ReadTensorF32: converts `numel` elements of `dtype` (f32, f16, bf16)
// starting at byte `offset` of `f` into `out` (resized). Bounds-checked;
// `what` names the tensor in errors.
absl::Status ReadTensorF32(const MappedFile& f, uint64_t offset, kernels::DType dtype,
                           uint64_t numel, const std::string& what, std::vector<float>* out);

// CheckShape: InvalidArgument "<file>: tensor <name> has shape [..], expected [..]".
absl::Status CheckShape(const std::string& file, const std::string& name,
                        const std::vector<int64_t>& got, const std::vector<int64_t>& want);

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_LOADERS_H_
