// tiny_vocab.h: vocabulary-only GGUF files for tokenizer tests (header-only;
// used by tests/model and tests/llamacpp, which both llama.cpp and ragkv
// load): a SentencePiece-style "llama" vocabulary (AddTinyLlamaVocab) or a
// byte-level "gpt2" one, with the tokenizer.ggml.pre and add_bos / add_eos
// keys present or absent as asked.
#ifndef RAGKV_TESTS_MODEL_TINY_VOCAB_H_
#define RAGKV_TESTS_MODEL_TINY_VOCAB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/gguf_writer.h"

namespace ragkv::model::testing {

// AddTinyBpeVocab: a "gpt2" vocabulary of the 256 byte symbols (GPT-2's
// byte-to-unicode form, ids 0..255, no merges) and <|endoftext|> (257th,
// control) as BOS and EOS; tokenizer.ggml.pre only when `pre` is given.
inline void AddTinyBpeVocab(::ragkv::testing::GgufWriter* w, const std::optional<std::string>& pre) {
  std::vector<std::string> tokens;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = direct ? b : 256 + n++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    tokens.push_back(s);
  }
  std::vector<int32_t> types(256, 1);
  tokens.push_back("<|endoftext|>");
  types.push_back(3);
  w->KvStr("tokenizer.ggml.model", "gpt2");
  if (pre.has_value()) w->KvStr("tokenizer.ggml.pre", *pre);
  w->KvStrs("tokenizer.ggml.tokens", tokens);
  w->KvI32s("tokenizer.ggml.token_type", types);
  w->KvStrs("tokenizer.ggml.merges", {});
  w->KvU32("tokenizer.ggml.bos_token_id", 256);
  w->KvU32("tokenizer.ggml.eos_token_id", 256);
}

struct TinyVocab {
  std::string name;                  // file name part
  bool bpe = false;                  // "gpt2" (AddTinyBpeVocab) or "llama" (AddTinyLlamaVocab, 300)
  std::optional<std::string> pre;    // BPE only
  std::optional<bool> add_bos, add_eos;  // the keys, when given
};

// WriteTinyVocab: the file under the test temp dir; returns its path.
inline std::string WriteTinyVocab(const TinyVocab& v) {
  ::ragkv::testing::GgufWriter w;
  w.KvStr("general.architecture", v.bpe ? "qwen2" : "llama");
  if (v.bpe) {
    AddTinyBpeVocab(&w, v.pre);
  } else {
    ::ragkv::testing::AddTinyLlamaVocab(&w, 300);
  }
  if (v.add_bos.has_value()) w.KvBool("tokenizer.ggml.add_bos_token", *v.add_bos);
  if (v.add_eos.has_value()) w.KvBool("tokenizer.ggml.add_eos_token", *v.add_eos);
  const std::string path = ::testing::TempDir() + "/ragkv_tiny_vocab_" + v.name + ".gguf";
  w.Write(path);
  return path;
}

}  // namespace ragkv::model::testing

#endif  // RAGKV_TESTS_MODEL_TINY_VOCAB_H_
