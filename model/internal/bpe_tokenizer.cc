#include "model/internal/loaders.h"
namespace ragkv::model::internal {
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfBpeTokenizer(const std::string& path) {
  return absl::UnimplementedError(path + ": tokenizer.json not yet supported");
}
}  // namespace ragkv::model::internal
