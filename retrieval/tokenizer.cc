#include "retrieval/tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ragkv::retrieval {

std::vector<int32_t> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c) + kByteOffset);
  return ids;
}

absl::StatusOr<std::string> ByteTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < kByteOffset || id >= kVocabSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("ByteTokenizer::Decode: id ", id, " at position ", i,
                       " is not a byte token (valid: ", kByteOffset, "..", kVocabSize - 1, ")"));
    }
    out.push_back(static_cast<char>(id - kByteOffset));
  }
  return out;
}

}  // namespace ragkv::retrieval
