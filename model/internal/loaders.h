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
