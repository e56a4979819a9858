#include "model/loader.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/internal/loaders.h"
#include "model/synthetic.h"

namespace ragkv::model {
namespace fs = std::filesystem;

const char* ModelFormatName(ModelFormat f) {
  switch (f) {
    case ModelFormat::kLlama2c: return "llama2c";
    case ModelFormat::kGguf: return "gguf";
    case ModelFormat::kSafetensors: return "safetensors";
    case ModelFormat::kSynthetic: return "synthetic";
  }
  return "?";
}

absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path) {
  if (absl::StartsWith(path, "synthetic:")) return ModelFormat::kSynthetic;
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "config.json", ec)) return ModelFormat::kSafetensors;
    return absl::InvalidArgumentError(absl::StrCat(path, ": directory without config.json"));
  }
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".gguf") return ModelFormat::kGguf;
  if (ext == ".safetensors" || ext == ".json") return ModelFormat::kSafetensors;
  char magic[4] = {0, 0, 0, 0};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, 4);
  if (in.gcount() == 4 && std::string_view(magic, 4) == "GGUF") return ModelFormat::kGguf;
  if (ext == ".bin") return ModelFormat::kLlama2c;
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown model format (expected .bin, .gguf, .safetensors or an HF directory)"));
}

absl::StatusOr<ModelParts> LoadModelParts(const std::string& path, const LoadOptions& options) {
  ASSIGN_OR_RETURN(ModelFormat f, DetectModelFormat(path));
  switch (f) {
    case ModelFormat::kLlama2c: return internal::LoadLlama2c(path, options);
    case ModelFormat::kGguf: return internal::LoadGguf(path, options);
    case ModelFormat::kSafetensors: return internal::LoadHfSafetensors(path, options);
    case ModelFormat::kSynthetic: {
      ASSIGN_OR_RETURN(SyntheticSpec spec, ParseSyntheticSpec(path));
      spec.config.kv_dtype = options.kv_dtype;
      if (options.max_seq_len > 0) spec.config.max_seq_len = options.max_seq_len;
      return MakeSyntheticParts(spec);
    }
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path,
                                                 const LoadOptions& options) {
  ASSIGN_OR_RETURN(ModelParts parts, LoadModelParts(path, options));
  auto m = Model::Create(std::move(parts.config), std::move(parts.weights));
  if (!m.ok()) return absl::Status(m.status().code(), absl::StrCat(path, ": ", m.status().message()));
  return m;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  if (path == "byte") return MakeByteTokenizer(259);
  if (absl::StartsWith(path, "synthetic:")) {
    ASSIGN_OR_RETURN(SyntheticSpec spec, ParseSyntheticSpec(path));
    return MakeByteTokenizer(spec.config.vocab_size);
  }
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "tokenizer.json", ec)) {
      return internal::LoadHfBpeTokenizer((fs::path(path) / "tokenizer.json").string());
    }
    if (fs::exists(fs::path(path) / "tokenizer.model", ec)) {
      return internal::LoadSentencePiece((fs::path(path) / "tokenizer.model").string());
    }
    return absl::NotFoundError(absl::StrCat(path, ": no tokenizer.json or tokenizer.model"));
  }
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".gguf") {
    return internal::LoadGgufTokenizer(path);
  }
  if (ext == ".model") return internal::LoadSentencePiece(path);
  if (ext == ".json") return internal::LoadHfBpeTokenizer(path);
  if (ext == ".bin") {
    ASSIGN_OR_RETURN(LlamaVocab v, internal::LoadLlama2cVocab(path));
    return MakeLlamaTokenizer(std::move(v));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown tokenizer format (expected .gguf, .model, .json, .bin or a directory)"));
}

absl::StatusOr<std::string> DefaultTokenizerPath(const std::string& model_path) {
  ASSIGN_OR_RETURN(ModelFormat f, DetectModelFormat(model_path));
  switch (f) {
    case ModelFormat::kGguf: return model_path;
    case ModelFormat::kSynthetic: return model_path;
    case ModelFormat::kSafetensors: {
      std::error_code ec;
      fs::path dir = model_path;
      if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
      return dir.string();
    }
    case ModelFormat::kLlama2c:
      return absl::NotFoundError(absl::StrCat(
          model_path, ": a llama2.c checkpoint carries no tokenizer; pass --tokenizer"));
  }
  return absl::InternalError("unreachable");
}

}  // namespace ragkv::model
