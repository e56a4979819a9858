// special_tokens.h: which BOS / EOS a GGUF vocabulary's prompts get, decided
// as the pinned llama.cpp decides it (src/llama-vocab.cpp, 3.21.1), so that
// ragkv and llama.cpp tokenize a prompt into the same ids. The rule is in
// docs/model.md ("BOS and EOS"); tests/llamacpp/bos_oracle_test.cc checks it
// on every models/ggml-vocab-*.gguf of the pinned llama.cpp.
//
// This is the one place the GGUF decision is made: the GGUF tokenizer
// loaders take bos/eos ids and add_bos from it, and callers ask the
// Tokenizer (Tokenizer::add_bos), never the metadata.
//
// Thread safety: plain values and pure functions.
#ifndef RAGKV_MODEL_SPECIAL_TOKENS_H_
#define RAGKV_MODEL_SPECIAL_TOKENS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ragkv::model {

// GgufTokenizerKeys: the tokenizer.ggml.* metadata the decision reads.
// Absent keys are nullopt (an absent key and a present one differ: a key
// always wins over the default).
struct GgufTokenizerKeys {
  std::string model;                        // tokenizer.ggml.model ("llama", "gpt2", ...)
  std::optional<std::string> pre;           // tokenizer.ggml.pre
  int64_t n_tokens = 0;                     // length of tokenizer.ggml.tokens
  std::optional<int64_t> bos_token_id;      // tokenizer.ggml.bos_token_id
  std::optional<int64_t> eos_token_id;      // tokenizer.ggml.eos_token_id
  std::optional<bool> add_bos_token;        // tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos_token;        // tokenizer.ggml.add_eos_token
};

// SpecialTokens: what llama.cpp does around a text tokenized with
// add_special = true. bos_id / eos_id are llama_vocab_bos / llama_vocab_eos
// (-1 where llama.cpp has none); add_bos implies bos_id >= 0, and so does
// add_eos for eos_id. add_bos / add_eos describe the ids, so they equal
// llama_vocab_get_add_bos / _eos except for the tokenizers that do not
// consult those flags (below).
struct SpecialTokens {
  bool add_bos = false;  // the ids start with bos_id
  bool add_eos = false;  // the ids end with eos_id (ragkv's prompts never do: docs/model.md)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
};

// DecideSpecialTokens: llama.cpp's decision for `keys`:
//  * default ids by tokenizer model (llama 1/2, gpt2 11/11, bert 101/none,
//    t5 none/1, plamo2 1/2, rwkv and gemma4 none), a default outside the
//    vocabulary is none; an id key inside the vocabulary replaces it, one
//    outside is ignored; the gpt2 pre-tokenizers glm4 / chatglm-bpe have no
//    BOS;
//  * add_bos by tokenizer type when the key is absent: SentencePiece
//    (llama) and WordPiece (bert) yes; t5, rwkv, plamo2 no; BPE (gpt2,
//    gemma4, ...) only for the pre-tokenizers llama.cpp marks (llama3 /
//    llama-bpe family, tekken, chameleon) -- so not for qwen2, gpt-2 or a
//    missing pre. add_eos: t5 yes, else no. The add_bos_token /
//    add_eos_token keys win, except that a gemma4 pre-tokenizer always adds
//    BOS, and that llama.cpp's WordPiece (bert: BOS and SEP, never EOS),
//    rwkv and plamo2 (neither) tokenizers do not look at the keys;
//  * "no_vocab" / "none": nothing (llama.cpp reads no key for them).
// Unimplemented naming the model when llama.cpp does not know the
// tokenizer model; InvalidArgument when add_bos (or add_eos) is decided but
// the vocabulary has no such token (llama.cpp asserts there).
absl::StatusOr<SpecialTokens> DecideSpecialTokens(const GgufTokenizerKeys& keys);

// ReadGgufTokenizerKeys: the keys of the GGUF at `path` (metadata only; the
// tokenizer model need not be one ragkv tokenizes; n_tokens is 0 without
// tokenizer.ggml.tokens). NotFound / InvalidArgument as for LoadModel;
// InvalidArgument when tokenizer.ggml.model is missing.
absl::StatusOr<GgufTokenizerKeys> ReadGgufTokenizerKeys(const std::string& path);

// GgufSpecialTokens: DecideSpecialTokens(ReadGgufTokenizerKeys(path)).
absl::StatusOr<SpecialTokens> GgufSpecialTokens(const std::string& path);

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_SPECIAL_TOKENS_H_
