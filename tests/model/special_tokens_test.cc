// The BOS/EOS decision without llama.cpp (tests/llamacpp/bos_oracle_test.cc
// checks it against llama.cpp itself): DecideSpecialTokens's no-key
// defaults and key overrides (the rules restated from the pinned
// llama-vocab.cpp, docs/model.md "BOS and EOS"), the decision reaching
// Tokenizer::add_bos / Encode through GGUF files written here, and the
// fingerprint v2 bump that keeps records made under the old rule apart.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "model/loader.h"
#include "model/special_tokens.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "tests/model/tiny_vocab.h"
#include "xxhash.h"

namespace ragkv::model {
namespace {

using ::ragkv::model::testing::WriteTinyVocab;

GgufTokenizerKeys Keys(const std::string& model, std::optional<std::string> pre,
                       int64_t n_tokens = 1000) {
  GgufTokenizerKeys k;
  k.model = model;
  k.pre = std::move(pre);
  k.n_tokens = n_tokens;
  return k;
}

SpecialTokens Decide(const GgufTokenizerKeys& k) {
  absl::StatusOr<SpecialTokens> s = DecideSpecialTokens(k);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.value_or(SpecialTokens{});
}

TEST(SpecialTokensTest, NoKeyDefaultsByTokenizerAndPreTokenizer) {
  // SentencePiece: BOS 1, EOS 2, BOS added.
  SpecialTokens s = Decide(Keys("llama", "default"));
  EXPECT_TRUE(s.add_bos);
  EXPECT_FALSE(s.add_eos);
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.eos_id, 2);
  // BPE: only the pre-tokenizers llama.cpp marks add BOS.
  for (const char* pre : {"llama-bpe", "llama3", "llama-v3", "falcon3", "tekken", "chameleon"}) {
    GgufTokenizerKeys k = Keys("gpt2", pre);
    k.bos_token_id = 7;
    s = Decide(k);
    EXPECT_TRUE(s.add_bos) << pre;
    EXPECT_EQ(s.bos_id, 7) << pre;
  }
  for (const char* pre : {"qwen2", "qwen35", "gpt-2", "default", "falcon", "starcoder", ""}) {
    GgufTokenizerKeys k = Keys("gpt2", pre);
    k.bos_token_id = 7;
    s = Decide(k);
    EXPECT_FALSE(s.add_bos) << pre;
    EXPECT_EQ(s.bos_id, 7) << pre;  // the id is still llama_vocab_bos
  }
  s = Decide(Keys("gpt2", std::nullopt));  // no pre at all: llama.cpp's "default"
  EXPECT_FALSE(s.add_bos);
  EXPECT_EQ(s.bos_id, 11);  // llama.cpp's BPE default ids
  EXPECT_EQ(s.eos_id, 11);
  // WordPiece: BOS ([CLS] 101), no EOS; Unigram: EOS, no BOS id.
  s = Decide(Keys("bert", std::nullopt));
  EXPECT_TRUE(s.add_bos);
  EXPECT_EQ(s.bos_id, 101);
  EXPECT_EQ(s.eos_id, -1);
  s = Decide(Keys("t5", std::nullopt));
  EXPECT_FALSE(s.add_bos);
  EXPECT_TRUE(s.add_eos);
  EXPECT_EQ(s.bos_id, -1);
  EXPECT_EQ(s.eos_id, 1);
  // gemma4: no default ids, BOS always added (needs a bos key).
  GgufTokenizerKeys g = Keys("gemma4", std::nullopt);
  g.bos_token_id = 2;
  s = Decide(g);
  EXPECT_TRUE(s.add_bos);
  EXPECT_EQ(s.bos_id, 2);
  // glm4 / chatglm-bpe have no BOS even with a key.
  GgufTokenizerKeys glm = Keys("gpt2", "chatglm-bpe");
  glm.bos_token_id = 5;
  s = Decide(glm);
  EXPECT_FALSE(s.add_bos);
  EXPECT_EQ(s.bos_id, -1);
}

TEST(SpecialTokensTest, KeysOverrideDefaultsWhereLlamaCppReadsThem) {
  GgufTokenizerKeys k = Keys("gpt2", "qwen2");
  k.bos_token_id = 151643;
  k.n_tokens = 151936;
  k.add_bos_token = true;
  EXPECT_TRUE(Decide(k).add_bos);
  k = Keys("gpt2", "llama-bpe");
  k.add_bos_token = false;
  EXPECT_FALSE(Decide(k).add_bos);
  k = Keys("llama", "default");
  k.add_bos_token = false;
  k.add_eos_token = true;
  SpecialTokens s = Decide(k);
  EXPECT_FALSE(s.add_bos);
  EXPECT_TRUE(s.add_eos);
  // A gemma4 pre-tokenizer adds BOS whatever the key says.
  k = Keys("gpt2", "gemma4");
  k.add_bos_token = false;
  EXPECT_TRUE(Decide(k).add_bos);
  // WordPiece, rwkv and plamo2 tokenization does not read the flags.
  k = Keys("bert", std::nullopt);
  k.add_bos_token = false;
  k.add_eos_token = true;
  s = Decide(k);
  EXPECT_TRUE(s.add_bos);
  EXPECT_FALSE(s.add_eos);
  for (const char* m : {"rwkv", "plamo2"}) {
    k = Keys(m, std::nullopt);
    k.add_bos_token = true;
    k.bos_token_id = 1;
    s = Decide(k);
    EXPECT_FALSE(s.add_bos) << m;
    EXPECT_FALSE(s.add_eos) << m;
  }
  // no_vocab: nothing, keys unread.
  k = Keys("no_vocab", std::nullopt);
  k.add_bos_token = true;
  k.bos_token_id = 3;
  s = Decide(k);
  EXPECT_FALSE(s.add_bos);
  EXPECT_EQ(s.bos_id, -1);
}

TEST(SpecialTokensTest, IdsInsideTheVocabularyOnly) {
  // A default outside the vocabulary is none; a key outside it is ignored.
  GgufTokenizerKeys k = Keys("gpt2", "qwen2", /*n_tokens=*/10);
  EXPECT_EQ(Decide(k).bos_id, -1);
  k.bos_token_id = 10;
  EXPECT_EQ(Decide(k).bos_id, -1);
  k = Keys("llama", "default", 100);
  k.bos_token_id = 100;
  k.eos_token_id = -1;
  SpecialTokens s = Decide(k);
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.eos_id, 2);
  k.bos_token_id = 99;
  EXPECT_EQ(Decide(k).bos_id, 99);
}

TEST(SpecialTokensTest, Errors) {
  EXPECT_EQ(DecideSpecialTokens(Keys("sentencepiece", std::nullopt)).status().code(),
            absl::StatusCode::kUnimplemented);
  // BOS added but no BOS token: llama.cpp asserts; ragkv refuses.
  GgufTokenizerKeys k = Keys("gpt2", "glm4");
  k.add_bos_token = true;
  EXPECT_EQ(DecideSpecialTokens(k).status().code(), absl::StatusCode::kInvalidArgument);
  k = Keys("t5", std::nullopt);
  k.add_bos_token = true;
  EXPECT_EQ(DecideSpecialTokens(k).status().code(), absl::StatusCode::kInvalidArgument);
  k = Keys("llama", "default", /*n_tokens=*/1);  // default BOS 1 is outside
  EXPECT_EQ(DecideSpecialTokens(k).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SpecialTokensTest, GgufTokenizersPrependBosOnlyWhereTheRuleSays) {
  struct Case {
    const char* name;
    bool bpe;
    std::optional<std::string> pre;
    std::optional<bool> key;
    bool want_bos;
    int32_t bos;
  };
  const Case cases[] = {
      {"qwen2_nokey", true, "qwen2", std::nullopt, false, 256},  // the case
      {"gpt2_nokey", true, "gpt-2", std::nullopt, false, 256},
      {"qwen2_key", true, "qwen2", true, true, 256},
      {"llama3_nokey", true, "llama-bpe", std::nullopt, true, 256},
      {"llama3_keyoff", true, "llama-bpe", false, false, 256},
      {"spm_nokey", false, std::nullopt, std::nullopt, true, 1},
      {"spm_keyoff", false, std::nullopt, false, false, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = WriteTinyVocab({c.name, c.bpe, c.pre, c.key, std::nullopt});
    absl::StatusOr<GgufTokenizerKeys> keys = ReadGgufTokenizerKeys(path);
    ASSERT_TRUE(keys.ok()) << keys.status();
    EXPECT_EQ(keys->add_bos_token, c.key);
    EXPECT_EQ(keys->pre, c.pre);
    absl::StatusOr<SpecialTokens> st = GgufSpecialTokens(path);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->add_bos, c.want_bos);
    EXPECT_EQ(st->bos_id, c.bos);
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadTokenizer(path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->add_bos(), c.want_bos);
    EXPECT_EQ((*tok)->bos_id(), c.bos);
    absl::StatusOr<std::vector<int32_t>> plain = (*tok)->Encode("ab c", false, false);
    absl::StatusOr<std::vector<int32_t>> prompt = (*tok)->Encode("ab c", true, false);
    ASSERT_TRUE(plain.ok() && prompt.ok());
    std::vector<int32_t> want = *plain;
    if (c.want_bos) want.insert(want.begin(), c.bos);
    EXPECT_EQ(*prompt, want);
    // add_eos stays an explicit request.
    absl::StatusOr<std::vector<int32_t>> eos = (*tok)->Encode("ab c", false, true);
    ASSERT_TRUE(eos.ok());
    EXPECT_EQ(eos->back(), (*tok)->eos_id());
  }
  // A pre-tokenizer ragkv does not tokenize still gets its decision.
  absl::StatusOr<SpecialTokens> st = GgufSpecialTokens(WriteTinyVocab({"nopre", true, {}, {}, {}}));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_FALSE(st->add_bos);
}

// Fingerprint v2: Model::fingerprint is XXH3-128 of the canonical text of
// docs/model.md with the tag "v2", then the weights' f32 bytes; the v1
// digest of the same model (records made under the old BOS rule) differs.
TEST(SpecialTokensTest, FingerprintIsVersion2) {
  absl::StatusOr<SyntheticSpec> spec =
      ParseSyntheticSpec("layers=2,dim=16,heads=2,kv_heads=1,ffn=24,vocab=300,seed=5");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<ModelParts> parts = MakeSyntheticParts(*spec);
  ASSERT_TRUE(parts.ok()) << parts.status();
  const ModelConfig& c = parts->config;
  const ModelWeights& w = parts->weights;
  auto digest = [&](int version) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    const std::string text = absl::StrFormat(
        "ragkv-model-fingerprint-v%d\narch=llama\ndim=%d\nhidden_dim=%d\nn_layers=%d\n"
        "n_heads=%d\nn_kv_heads=%d\nhead_dim=%d\nvocab=%d\nrope_theta=%.9g\n"
        "rope_layout=interleaved\nrope_scaling=none\nnorm_eps=%.9g\nqkv_bias=0\nkv_dtype=f16\n"
        "weights=f32\n",
        version, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
        c.vocab_size, c.rope_theta, c.norm_eps);
    XXH3_128bits_update(st, text.data(), text.size());
    auto add = [&](const std::vector<float>& v) {
      XXH3_128bits_update(st, v.data(), v.size() * sizeof(float));
    };
    add(w.tok_embeddings);
    for (const LayerWeights& l : w.layers) {
      for (const auto* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate,
                            &l.w_up, &l.w_down}) {
        add(*t);
      }
    }
    add(w.final_norm);
    add(w.classifier);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    Fingerprint fp;
    std::memcpy(fp.data(), canon.digest, 16);
    return fp;
  };
  ASSERT_TRUE(w.layers[0].bq.empty() && w.layers[0].q_norm.empty());
  ASSERT_FALSE(c.shared_classifier);
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Create(c, w);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->fingerprint(), digest(2));
  EXPECT_NE((*m)->fingerprint(), digest(1));
}

}  // namespace
}  // namespace ragkv::model
