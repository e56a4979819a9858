// tokenizer.h: the tokenizer interface retrieval chunks with, and a built-in
// deterministic byte-level tokenizer.
//
// retrieval/ may not depend on model/ (docs/design.md §2), so it sees tokenizers
// only through this interface; services/ adapts the model's real tokenizer
// (SentencePiece, llama2.c tok*.bin, GGUF) to it. The chunk token ids the
// catalogue stores are exactly Encode(chunk text) of the tokenizer given to
// the Retriever, i.e. what precompute feeds the model.
//
// Thread safety: implementations must be safe for concurrent const calls.
#ifndef RAGKV_RETRIEVAL_TOKENIZER_H_
#define RAGKV_RETRIEVAL_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ragkv::retrieval {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encode: token ids of `text` (UTF-8), without BOS/EOS. Deterministic: the
  // same text gives the same ids in every process.
  virtual std::vector<int32_t> Encode(std::string_view text) const = 0;

  // Decode: the text of `ids`. InvalidArgument for an id outside the vocab.
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;

  // Fingerprint: a stable string identifying the tokenizer (name, vocab,
  // version). The catalogue records it and refuses to reopen under another
  // tokenizer, since stored token ids would then be wrong.
  virtual std::string Fingerprint() const = 0;
};

// ByteTokenizer: one token per UTF-8 byte, id = byte + kByteOffset (ids 0..2
// are reserved for pad/BOS/EOS, as in byte-fallback vocabularies). Vocab 259.
// Needs no data; used by default and by tests.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kByteOffset = 3;
  static constexpr int32_t kVocabSize = 256 + kByteOffset;

  std::vector<int32_t> Encode(std::string_view text) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  std::string Fingerprint() const override { return "ragkv-byte-tokenizer-v1"; }
};

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_TOKENIZER_H_
