// Tokenizers: llama2.c's encoder over tokenizer.bin and over the GGUF's
// embedded vocabulary vs libsentencepiece on tokenizer.model (512 and 32k
// vocabularies), round trips, and the byte tokenizer.
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include <random>
#include <unordered_map>

#include "model/internal/loaders.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "tests/model/test_util.h"

namespace ragkv::model {
namespace {

using ::ragkv::model::testing::ModelFile;

const std::vector<std::string>& Sentences() {
  static const auto* s = new std::vector<std::string>{
      "Once upon a time",
      "Tom and his dog went to the park.",
      "Lily had a red ball. She said, \"Let's play!\"",
      "The quick brown fox jumps over the lazy dog 1234567890 times.",
      "Hello\nworld\ttab",
      "naïve café, Zürich — déjà vu",
      "日本語のテキスト and 中文",
      "emoji: 😀🎉 👍🏽 and a snowman ☃",
      "a",
      " ",
      "x  y",
      "trailing space ",
      "multiple   inner    spaces",
      "Ünïcödé ñ ø å 🦄 ∑ ∫ √",
      "<s> literal tags </s> and <unk>",
      "",
  };
  return *s;
}

std::unique_ptr<Tokenizer> Load(const std::string& file) {
  auto t = LoadTokenizer(ModelFile(file));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

std::string Show(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + ",";
  return s;
}

// Texts on which llama2.c's encoder and SentencePiece may legitimately
// differ (docs/model.md): SentencePiece's normalizer collapses runs of
// whitespace and strips leading/trailing whitespace when the model's
// normalizer spec asks for it (remove_extra_whitespaces), which llama2.c's
// encoder never does.
bool WhitespaceEdgeCase(const std::string& s) {
  return s.find("  ") != std::string::npos || (!s.empty() && (s.front() == ' ' || s.back() == ' '));
}

void ExpectSameEncodings(const Tokenizer& a, const Tokenizer& b, bool allow_ws_edge) {
  for (const std::string& s : Sentences()) {
    auto ea = a.Encode(s, true, false);
    auto eb = b.Encode(s, true, false);
    ASSERT_TRUE(ea.ok() && eb.ok());
    if (allow_ws_edge && WhitespaceEdgeCase(s) && *ea != *eb) {
      std::cerr << "documented difference (" << a.Name() << " vs " << b.Name() << ") on '" << s
                << "': " << Show(*ea) << " vs " << Show(*eb) << "\n";
      continue;
    }
    EXPECT_EQ(Show(*ea), Show(*eb)) << a.Name() << " vs " << b.Name() << " on '" << s << "'";
  }
}

TEST(TokenizerTest, Tok512BinModelAndGgufAgree) {
  RAGKV_REQUIRE_MODEL_FILE("tok512.bin");
  RAGKV_REQUIRE_MODEL_FILE("tok512.model");
  RAGKV_REQUIRE_MODEL_FILE("stories260K.gguf");
  auto bin = Load("tok512.bin");
  auto sp = Load("tok512.model");
  auto gguf = Load("stories260K.gguf");
  ASSERT_TRUE(bin && sp && gguf);
  EXPECT_EQ(bin->vocab_size(), 512);
  EXPECT_EQ(sp->vocab_size(), 512);
  EXPECT_EQ(gguf->vocab_size(), 512);
  EXPECT_EQ(sp->Name(), "sentencepiece");
  ExpectSameEncodings(*bin, *gguf, /*allow_ws_edge=*/false);
  ExpectSameEncodings(*bin, *sp, /*allow_ws_edge=*/true);
}

TEST(TokenizerTest, Llama2_32kBinAndModelAgree) {
  RAGKV_REQUIRE_MODEL_FILE("llama2_tokenizer.bin");
  RAGKV_REQUIRE_MODEL_FILE("llama2_tokenizer.model");
  auto bin = Load("llama2_tokenizer.bin");
  auto sp = Load("llama2_tokenizer.model");
  ASSERT_TRUE(bin && sp);
  EXPECT_EQ(bin->vocab_size(), 32000);
  EXPECT_EQ(sp->vocab_size(), 32000);
  ExpectSameEncodings(*bin, *sp, /*allow_ws_edge=*/true);
  // A known encoding of the Llama-2 tokenizer.
  auto ids = sp->Encode("Hello world", true, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 15043, 3186}));
}

TEST(TokenizerTest, RoundTripIncludingEmojiAndByteFallback) {
  for (const char* f : {"tok512.bin", "tok512.model", "stories260K.gguf", "llama2_tokenizer.bin",
                        "llama2_tokenizer.model"}) {
    if (!::ragkv::model::testing::HaveModelFile(f)) continue;
    auto tok = Load(f);
    ASSERT_TRUE(tok);
    for (const std::string& s : Sentences()) {
      const bool sp = tok->Name() == "sentencepiece";
      if (sp && WhitespaceEdgeCase(s)) continue;  // normalizer may rewrite whitespace
      auto ids = tok->Encode(s, true, true);
      ASSERT_TRUE(ids.ok());
      EXPECT_EQ(tok->Decode(*ids), s) << f << ": '" << s << "'";
      // Streaming decode (DecodePiece) gives the same text.
      std::string streamed;
      int32_t prev = tok->bos_id();
      for (int32_t id : *ids) {
        if (!tok->IsControl(id)) streamed += tok->DecodePiece(prev, id);
        prev = id;
      }
      EXPECT_EQ(streamed, s) << f << ": '" << s << "'";
    }
  }
}

TEST(TokenizerTest, BosEosHandling) {
  RAGKV_REQUIRE_MODEL_FILE("tok512.bin");
  auto tok = Load("tok512.bin");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  auto a = tok->Encode("hi", false, false);
  auto b = tok->Encode("hi", true, true);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(b->size(), a->size() + 2);
  EXPECT_EQ(b->front(), 1);
  EXPECT_EQ(b->back(), 2);
  EXPECT_TRUE(tok->IsControl(1));
  EXPECT_EQ(tok->DecodePiece(0, 1), "");
  auto empty = tok->Encode("", true, false);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, std::vector<int32_t>{1});
}

TEST(TokenizerTest, ByteTokenizer) {
  auto tok = MakeByteTokenizer(300);
  ASSERT_TRUE(tok.ok());
  const std::string s = "héllo 🌍\n";
  auto ids = (*tok)->Encode(s, true, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), s.size() + 1);
  EXPECT_EQ((*ids)[1], 3 + 'h');
  EXPECT_EQ((*tok)->Decode(*ids), s);
  EXPECT_FALSE(MakeByteTokenizer(100).ok());
  auto synth = LoadTokenizer("synthetic:layers=1,dim=8,heads=1,ffn=8,vocab=400");
  ASSERT_TRUE(synth.ok()) << synth.status();
  EXPECT_EQ((*synth)->vocab_size(), 400);
}

TEST(TokenizerTest, BadTokenizerFiles) {
  EXPECT_EQ(LoadTokenizer("/nonexistent/tok.bin").status().code(), absl::StatusCode::kNotFound);
  const std::string dir = ::testing::TempDir();
  const std::string bad = dir + "/bad_tok.bin";
  {
    std::ofstream o(bad, std::ios::binary);
    int32_t max_len = 10;
    o.write(reinterpret_cast<char*>(&max_len), 4);
    float score = 0;
    int32_t len = 50;  // longer than max_token_length
    o.write(reinterpret_cast<char*>(&score), 4);
    o.write(reinterpret_cast<char*>(&len), 4);
  }
  auto t = LoadTokenizer(bad);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(bad), std::string::npos) << t.status();
  const std::string badsp = dir + "/bad.model";
  {
    std::ofstream o(badsp, std::ios::binary);
    o << "this is not a protobuf";
  }
  auto s = LoadTokenizer(badsp);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(badsp), std::string::npos) << s.status();
}

}  // namespace
}  // namespace ragkv::model

namespace ragkv::model {
namespace {

// A tiny GPT-2-style tokenizer.json: 256 byte symbols, a few merges, one
// special token.
std::string WriteTinyBpe(bool llama3_split) {
  // GPT-2 bytes_to_unicode.
  std::vector<uint32_t> b2u(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    b2u[b] = direct ? b : 256 + n++;
  }
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) s.push_back(char(cp));
    else { s.push_back(char(0xC0 | (cp >> 6))); s.push_back(char(0x80 | (cp & 0x3F))); }
    return s;
  };
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[utf8(b2u[b])] = b;
  const std::string G = utf8(b2u[' ']);  // "Ġ"
  vocab["he"] = 256;
  vocab[G + "t"] = 257;
  vocab[G + "the"] = 258;
  vocab["the"] = 259;
  nlohmann::json j = {
      {"model", {{"type", "BPE"}, {"vocab", vocab},
                 {"merges", {"h e", G + " t", G + "t he", "t he"}}}},
      {"added_tokens", {{{"id", 260}, {"content", "<|endoftext|>"}, {"special", true}}}},
  };
  if (llama3_split) {
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {
        {{"type", "Split"}, {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
  } else {
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  }
  const std::string path = ::testing::TempDir() + "/ragkv_tiny_tokenizer_" +
                           (llama3_split ? "l3" : "gpt2") + ".json";
  std::ofstream(path) << j.dump();
  return path;
}

TEST(BpeTokenizerTest, MergesSpecialTokensAndRoundTrip) {
  for (bool l3 : {false, true}) {
    auto tok = LoadTokenizer(WriteTinyBpe(l3));
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->Name(), "hf-bpe");
    EXPECT_EQ((*tok)->eos_id(), 260);
    auto ids = (*tok)->Encode("the the", false, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, (std::vector<int32_t>{259, 258}));
    auto sp = (*tok)->Encode("the<|endoftext|>the", false, true);
    ASSERT_TRUE(sp.ok());
    EXPECT_EQ(*sp, (std::vector<int32_t>{259, 260, 259, 260}));
    EXPECT_EQ((*tok)->Decode(*sp), "thethe");
    for (const std::string& s : Sentences()) {
      auto e = (*tok)->Encode(s, false, false);
      ASSERT_TRUE(e.ok());
      EXPECT_EQ((*tok)->Decode(*e), s) << s;
    }
  }
}

TEST(BpeTokenizerTest, MalformedJsonFails) {
  const std::string p = ::testing::TempDir() + "/ragkv_bad_tokenizer.json";
  std::ofstream(p) << "{\"model\": {\"type\": \"BPE\", \"vocab\": [1,2]}}";
  auto t = LoadTokenizer(p);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(p), std::string::npos);
  std::ofstream(p) << "{not json";
  EXPECT_FALSE(LoadTokenizer(p).ok());
  std::ofstream(p) << "{\"model\": {\"type\": \"Unigram\"}}";
  EXPECT_EQ(LoadTokenizer(p).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace ragkv::model

namespace ragkv::model {
namespace {

// NaiveLlama2cEncode: llama2.c run.c's encode() verbatim in spirit (O(n^2)
// rescans), as the oracle for the heap-based merge.
std::vector<int32_t> NaiveLlama2cEncode(const LlamaVocab& v, const std::string& text) {
  std::unordered_map<std::string, int32_t> lookup;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (i == 0 || i == 1 || i == 2) continue;
    if (v.pieces[i].size() == 6 && v.pieces[i].rfind("<0x", 0) == 0) continue;
    lookup.emplace(v.pieces[i], static_cast<int32_t>(i));
  }
  std::vector<int32_t> t = {1};
  if (!text.empty()) t.push_back(lookup.at(" "));
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    while (len < 4 && i + len < text.size() && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) ++len;
    auto it = lookup.find(text.substr(i, len));
    if (it != lookup.end()) {
      t.push_back(it->second);
    } else {
      for (size_t j = 0; j < len; ++j) t.push_back(static_cast<unsigned char>(text[i + j]) + 3);
    }
    i += len;
  }
  while (true) {
    float best = -1e30f;
    int best_id = -1;
    size_t best_i = 0;
    for (size_t i = 1; i + 1 < t.size(); ++i) {
      auto it = lookup.find(v.pieces[t[i]] + v.pieces[t[i + 1]]);
      if (it != lookup.end() && v.scores[it->second] > best) {
        best = v.scores[it->second];
        best_id = it->second;
        best_i = i;
      }
    }
    if (best_id < 0) break;
    t[best_i] = best_id;
    t.erase(t.begin() + best_i + 1);
  }
  return t;
}

TEST(TokenizerTest, HeapMergeEqualsNaiveLlama2cEncoder) {
  RAGKV_REQUIRE_MODEL_FILE("tok512.bin");
  auto vocab = internal::LoadLlama2cVocab(ModelFile("tok512.bin"));
  ASSERT_TRUE(vocab.ok());
  auto tok = MakeLlamaTokenizer(*vocab);
  ASSERT_TRUE(tok.ok());
  const std::vector<std::string> alphabet = {"a", "e", "t", "h", " ", "s", "n", "o", "d", ".",
                                             "\n", "é", "😀", "the", " was", "in", "  "};
  std::mt19937 rng(17);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int len = static_cast<int>(rng() % 120);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    auto got = (*tok)->Encode(s, true, false);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(Show(*got), Show(NaiveLlama2cEncode(*vocab, s))) << "'" << s << "'";
  }
}

}  // namespace
}  // namespace ragkv::model
