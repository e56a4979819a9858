// tokenizer.h: Tokenizer, text <-> token ids for the supported vocabularies.
//
// Implementations (made by LoadTokenizer in loader.h, or the factories
// below):
//  * LlamaTokenizer: llama2.c's SentencePiece-BPE encoder (score-ordered
//    pair merges, dummy-prefix space, <0xXX> byte fallback) over a
//    vocabulary from tokenizer.bin or a GGUF's tokenizer.ggml.* metadata;
//  * SentencePieceTokenizer: a tokenizer.model through libsentencepiece;
//  * BpeTokenizer: Hugging Face tokenizer.json byte-level BPE (GPT-2 style);
//  * ByteTokenizer: ids 0 <unk>, 1 <s>, 2 </s>, 3+b for byte b (synthetic).
// Immutable after construction; all methods are const and thread-safe.
#ifndef RAGKV_MODEL_TOKENIZER_H_
#define RAGKV_MODEL_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ragkv::model {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encode: token ids of `text` (UTF-8). add_bos: start them as a prompt
  // starts, with bos_id() when the vocabulary's rule adds one (add_bos()),
  // else with nothing; so Encode(text, true, false) is llama.cpp's
  // llama_tokenize(add_special = true) of a GGUF vocabulary whose
  // add_eos is false (all that ragkv tokenizes unless a key says so).
  // add_eos: append eos_id() (when there is one) whatever the rule.
  // Errors only on internal inconsistency (e.g. a byte with no fallback
  // token).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos,
                                                      bool add_eos) const = 0;
  // Decode: the text of `ids`; BOS/EOS/control ids produce nothing, and the
  // dummy-prefix space of SentencePiece-style vocabularies is removed, so
  // Decode(Encode(x)) == x for the texts the vocabulary can represent.
  virtual std::string Decode(absl::Span<const int32_t> ids) const;
  // DecodePiece: the text of `id` printed after `prev` (llama2.c's streaming
  // semantics: a leading space is dropped right after BOS; byte tokens give
  // their raw byte). Concatenating DecodePiece over a generation gives its
  // text. Out-of-range ids give "".
  virtual std::string DecodePiece(int32_t prev, int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  // add_bos: whether a prompt starts with bos_id() (then bos_id() >= 0).
  // The one BOS decision callers consult (docs/model.md, "BOS and EOS"):
  // for a GGUF, llama.cpp's (model/special_tokens.h); for tokenizer.bin,
  // tokenizer.model and the byte tokenizer, yes; for tokenizer.json,
  // whether a BOS token was found (by name).
  virtual bool add_bos() const = 0;
  virtual int32_t eos_id() const = 0;  // -1 when none
  // IsControl: BOS/EOS/unk/pad and other non-text ids.
  virtual bool IsControl(int32_t id) const = 0;
  // Name: e.g. "llama2c", "sentencepiece", "hf-bpe", "byte".
  virtual std::string Name() const = 0;
};

// LlamaVocab: a SentencePiece-style vocabulary: pieces use ' ' (not U+2581)
// for spaces and "<0xXX>" for byte-fallback tokens.
struct LlamaVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;  // GGUF token types (1 normal, 2 unk, 3 control, 6 byte); may be empty
  int32_t bos_id = 1, eos_id = 2, unk_id = 0;
  bool add_bos = true;  // prompts start with bos_id (Tokenizer::add_bos)
  // add_space_prefix: the encoded text starts with the space piece
  // (SentencePiece's dummy prefix; GGUF `tokenizer.ggml.add_space_prefix`,
  // default true). Unset: when " " is a piece (llama2.c's rule).
  std::optional<bool> add_space_prefix;
};

// MakeLlamaTokenizer: InvalidArgument if the vocabulary is empty or its
// pieces/scores sizes differ.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlamaTokenizer(LlamaVocab vocab);
// MakeByteTokenizer: the byte-level fallback for a model with vocab_size
// (>= 259) ids; ids >= 259 decode to "".
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeByteTokenizer(int32_t vocab_size);

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_TOKENIZER_H_
