// GGUF tokenizers against llama.cpp: its own test vectors (models/
// ggml-vocab-<name>.gguf with .inp / .out, tokenized without BOS and without
// parsing special tokens, as llama.cpp's test-tokenizer-0 does), and
// llama.cpp's tokenizer on MuSiQue passages (real text: names, numbers,
// punctuation, accents).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "absl/strings/str_split.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/model/test_util.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/llamacpp_oracle.h"
#include "tests/support/require.h"
#include "tests/support/source_dir.h"
#include "tests/support/run_command.h"

namespace ragkv::model {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string VocabPath(const std::string& name) {
  return std::string(RAGKV_LLAMACPP_MODELS_DIR) + "/ggml-vocab-" + name + ".gguf";
}

class VocabVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectorsTest, MatchesLlamaCppTestVectors) {
  const std::string path = VocabPath(GetParam());
  auto tok = LoadTokenizer(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<std::string> inputs =
      absl::StrSplit(Read(path + ".inp"), "\n__ggml_vocab_test__\n");
  const std::vector<std::string> outputs = absl::StrSplit(Read(path + ".out"), '\n');
  ASSERT_GE(outputs.size(), inputs.size() - 1);
  int checked = 0, failed = 0;
  for (size_t i = 0; i + 1 < inputs.size(); ++i) {  // the last split is empty
    std::vector<int32_t> want;
    for (absl::string_view id : absl::StrSplit(outputs[i], ' ', absl::SkipEmpty())) {
      want.push_back(std::stoi(std::string(id)));
    }
    auto got = (*tok)->Encode(inputs[i], /*add_bos=*/false, /*add_eos=*/false);
    ASSERT_TRUE(got.ok()) << got.status();
    ++checked;
    if (*got != want) {
      ++failed;
      ADD_FAILURE() << GetParam() << " case " << i << " '" << inputs[i] << "': got "
                    << ::testing::PrintToString(*got) << " want " << ::testing::PrintToString(want);
    }
  }
  std::printf("%s: %d/%d test vectors equal\n", GetParam().c_str(), checked - failed, checked);
  EXPECT_GT(checked, 20);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabVectorsTest,
                         ::testing::Values("llama-spm", "llama-bpe", "qwen2", "phi-3", "gpt-2"),
                         [](const auto& p) {
                           std::string n = p.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

// MusiquePath: the MuSiQue file (RAGKV_TEST_CORPUS, else ../shared/corpus).
std::string MusiquePath() {
  const char* env = std::getenv("RAGKV_TEST_CORPUS");
  return (env != nullptr && *env ? std::string(env)
                                 : std::string(RAGKV_SOURCE_DIR) + "/../shared/corpus") +
         "/musique_dev.json";
}

// MuSiQue passages through both tokenizers (no BOS, no special parsing).
TEST(VocabMusiqueTest, PassagesMatchLlamaCpp) {
  const std::string corpus = MusiquePath();
  std::ifstream in(corpus);
  RAGKV_REQUIRE_OR_SKIP(in) << corpus << " not found";
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<std::string> texts;
  for (const auto& q : j) {
    for (const auto& p : q["passages"]) {
      texts.push_back(p["text"].get<std::string>());
      if (texts.size() >= 300) break;
    }
    if (texts.size() >= 300) break;
  }
  ASSERT_GE(texts.size(), 100u);
  for (const std::string name : {"llama-bpe", "qwen2", "llama-spm"}) {
    auto ours = LoadTokenizer(VocabPath(name));
    ASSERT_TRUE(ours.ok()) << ours.status();
    auto theirs = ::ragkv::testing::LlamaCppModel::Load(VocabPath(name), {.vocab_only = true});
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    int equal = 0;
    for (const std::string& t : texts) {
      auto a = (*ours)->Encode(t, false, false);
      auto b = (*theirs)->Tokenize(t, false, false);
      ASSERT_TRUE(a.ok() && b.ok());
      equal += *a == *b;
      if (*a != *b) ADD_FAILURE() << name << ": '" << t.substr(0, 80) << "...' differs";
    }
    std::printf("%s: %d/%zu MuSiQue passages tokenize as llama.cpp does\n", name.c_str(), equal,
                texts.size());
    EXPECT_EQ(equal, static_cast<int>(texts.size()));
  }
}

// The benches' synthetic vocabulary (tests/support/gguf_writer.h
// AddTinyLlamaVocab: every piece starts with the space piece, no letter
// alone, no bare space piece, every score 0): llama.cpp merges characters
// that are no pieces themselves (" e" + "n" -> " en"), falls back to bytes
// for what stays unmerged, and breaks score ties leftmost. Before session 22
// ragkv encoded such text as bytes only, so chunks it stored were never
// found in llama.cpp's prompts.
TEST(VocabMusiqueTest, AVocabOfSpacePrefixedPiecesMatchesLlamaCpp) {
  const std::string corpus = MusiquePath();
  std::ifstream in(corpus);
  RAGKV_REQUIRE_OR_SKIP(in) << corpus << " not found";
  const nlohmann::json j = nlohmann::json::parse(in);
  const std::string path = ::testing::TempDir() + "/tiny_vocab.gguf";
  {
    ::ragkv::testing::GgufWriter g;
    g.KvStr("general.architecture", "llama");
    g.KvU32("llama.context_length", 256);
    g.KvU32("llama.embedding_length", 64);
    g.KvU32("llama.feed_forward_length", 128);
    g.KvU32("llama.block_count", 1);
    g.KvU32("llama.attention.head_count", 4);
    g.KvU32("llama.attention.head_count_kv", 4);
    g.KvF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    ::ragkv::testing::AddTinyLlamaVocab(&g, 32000);
    g.Write(path, 3);
  }
  auto ours = LoadTokenizer(path);
  ASSERT_TRUE(ours.ok()) << ours.status();
  auto theirs = ::ragkv::testing::LlamaCppModel::Load(path, {.vocab_only = true});
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  int equal = 0, n = 0;
  for (const auto& q : j) {
    for (const auto& p : q["passages"]) {
      for (const std::string& t : {p["text"].get<std::string>(), "\n\n" + p["text"].get<std::string>()}) {
        auto a = (*ours)->Encode(t, false, false);
        auto b = (*theirs)->Tokenize(t, false, false);
        ASSERT_TRUE(a.ok() && b.ok());
        ++n;
        equal += *a == *b;
        if (*a != *b) ADD_FAILURE() << "'" << t.substr(0, 80) << "...' differs";
      }
    }
    if (n >= 200) break;
  }
  EXPECT_EQ(equal, n);
}

}  // namespace
}  // namespace ragkv::model

#ifdef RAGKV_BINARY
namespace ragkv::model {
namespace {

// `ragkv tokenize --ids --no-bos` prints what llama.cpp's tokenizer returns.
TEST(TokenizeCommandTest, IdsMatchLlamaCpp) {
  const std::string vocab = VocabPath("llama-bpe");
  const std::string text = "The Eiffel Tower, completed in 1889, is 330 m tall.";
  const std::string cmd = std::string(RAGKV_BINARY) + " tokenize --model " + vocab +
                          " --text '" + text + "' --ids --no-bos";
  std::string out;
  ASSERT_EQ(::ragkv::testing::RunCommand(cmd, &out), 0) << out;
  auto theirs = ::ragkv::testing::LlamaCppModel::Load(vocab, {.vocab_only = true});
  ASSERT_TRUE(theirs.ok());
  auto want = (*theirs)->Tokenize(text, false, false);
  ASSERT_TRUE(want.ok());
  std::string expect = "[";
  for (size_t i = 0; i < want->size(); ++i) expect += (i ? ", " : "") + std::to_string((*want)[i]);
  EXPECT_EQ(out, expect + "]\n");
  // A missing file: exit 1 with a message.
  out.clear();
  EXPECT_NE(::ragkv::testing::RunCommand(
                std::string(RAGKV_BINARY) + " tokenize --model /nonexistent --text x 2>&1", &out),
            0);
  EXPECT_NE(out.find("/nonexistent"), std::string::npos) << out;
}

}  // namespace
}  // namespace ragkv::model
#endif
