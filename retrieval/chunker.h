// chunker.h: token-based, word-preserving, passage-aware document chunker.
//
// A chunk is a contiguous byte span of a document's text that starts at a
// word start and ends at a word end (whitespace-delimited words are never
// split; the only exception is a single word that alone exceeds the target,
// which is cut at UTF-8 code-point boundaries). Its token ids are exactly
// tokenizer.Encode(chunk text): what precompute feeds the model and what the
// KV store keys. Chunking is a pure function of (text, options, tokenizer).
//
// Algorithm: each word is costed as Encode(preceding whitespace + word) (an
// upper bound for merging tokenizers such as SentencePiece); words are packed
// greedily up to target_tokens; when a chunk must be cut, the cut prefers the
// last paragraph end, then the last sentence end, that keeps the chunk at
// least half full; the exact Encode of the chosen span is then checked and
// the span shrunk word by word if it still exceeds the target. A text that
// fits whole is one chunk ("a short passage is one chunk"). With overlap,
// the next chunk restarts at the latest word such that the repeated words
// cost <= overlap_tokens (always making progress).
//
// Thread safety: Chunk() is const and thread-safe if the tokenizer is.
#ifndef RAGKV_RETRIEVAL_CHUNKER_H_
#define RAGKV_RETRIEVAL_CHUNKER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "retrieval/tokenizer.h"

namespace ragkv::retrieval {

struct ChunkerOptions {
  // Maximum tokens per chunk (default 512, as CacheBlend's evaluation). >= 8.
  int target_tokens = 512;
  // Tokens repeated between consecutive chunks (default 0: KV chunks are
  // concatenated in prompts, so overlap would duplicate context). < target/2.
  int overlap_tokens = 0;
};

// Chunk: one chunk of a document.
struct ChunkSpan {
  int32_t ordinal = 0;       // 0-based index within the document
  uint64_t byte_begin = 0;   // [byte_begin, byte_end) in the document text
  uint64_t byte_end = 0;
  uint64_t token_begin = 0;  // document-level token offset (sum of word costs before it)
  std::vector<int32_t> token_ids;  // Encode(text)
  std::string text;                // document.text[byte_begin, byte_end)
};

class Chunker {
 public:
  // Create: InvalidArgument for target_tokens < 8 or overlap out of range,
  // or a null tokenizer.
  static absl::StatusOr<std::unique_ptr<Chunker>> Create(ChunkerOptions options,
                                                         std::shared_ptr<const Tokenizer> tokenizer);

  // Chunk: the chunks of `text` in order. InvalidArgument when text has no
  // words. Chunks' byte spans are increasing and cover every word.
  absl::StatusOr<std::vector<ChunkSpan>> Chunk(std::string_view text) const;

  const ChunkerOptions& options() const { return options_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  Chunker(ChunkerOptions options, std::shared_ptr<const Tokenizer> tokenizer)
      : options_(options), tokenizer_(std::move(tokenizer)) {}
  ChunkerOptions options_;
  std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_CHUNKER_H_
