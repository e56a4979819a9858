// Against llama2.c's own run.c: logits at 64 positions (1e-4 abs), greedy
// continuations and text prompts, for both the .bin and the .gguf.
#include <nlohmann/json.hpp>

#include <cmath>

#include "model/generate.h"
#include "model/loader.h"
#include "tests/model/test_util.h"

namespace ragkv::model {
namespace {

using ::ragkv::model::testing::ModelFile;
using ::ragkv::model::testing::ReadFile;

class ReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_MODEL_FILE(GetParam());
    RAGKV_REQUIRE_MODEL_FILE("stories260K.reference.json");
    LoadOptions lo;
    lo.max_seq_len = 512;  // trained context (the GGUF says 2048)
    auto m = LoadModel(ModelFile(GetParam()), lo);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *std::move(m);
    ref_ = nlohmann::json::parse(ReadFile(ModelFile("stories260K.reference.json")));
  }
  std::unique_ptr<Model> model_;
  nlohmann::json ref_;
};

TEST_P(ReferenceTest, ConfigMatches) {
  const ModelConfig& c = model_->config();
  const auto& rc = ref_["config"];
  EXPECT_EQ(c.dim, rc["dim"].get<int>());
  EXPECT_EQ(c.hidden_dim, rc["hidden_dim"].get<int>());
  EXPECT_EQ(c.n_layers, rc["n_layers"].get<int>());
  EXPECT_EQ(c.n_heads, rc["n_heads"].get<int>());
  EXPECT_EQ(c.n_kv_heads, rc["n_kv_heads"].get<int>());
  EXPECT_EQ(c.vocab_size, rc["vocab_size"].get<int>());
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_NEAR(c.norm_eps, 1e-5f, 1e-9f);
}

TEST_P(ReferenceTest, LogitsWithin1e4) {
  const std::vector<int32_t> tokens = ref_["logits"]["tokens"].get<std::vector<int32_t>>();
  const auto& rows = ref_["logits"]["rows"];
  ASSERT_EQ(rows.size(), tokens.size());
  const int vocab = model_->config().vocab_size;
  auto cache = model_->NewCache();
  ASSERT_TRUE(cache.ok());
  Workspace ws;
  std::vector<float> logits(tokens.size() * vocab);
  ASSERT_TRUE(model_->Prefill(tokens, &*cache, &ws, LogitsMode::kAll, logits.data()).ok());
  double max_err = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    ASSERT_EQ(rows[t].size(), size_t(vocab));
    for (int i = 0; i < vocab; ++i) {
      max_err = std::max(max_err, std::abs(double(logits[t * vocab + i]) - rows[t][i].get<double>()));
    }
  }
  EXPECT_LT(max_err, 1e-4) << "max abs logit error over 64 positions";
}

TEST_P(ReferenceTest, GreedyContinuationsExact) {
  for (const auto& g : ref_["greedy"]) {
    const auto prompt = g["prompt"].get<std::vector<int32_t>>();
    const auto want = g["continuation"].get<std::vector<int32_t>>();
    auto got = Generate(*model_, prompt, static_cast<int>(want.size()), SamplerOptions{});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want) << "prompt size " << prompt.size();
  }
}

TEST_P(ReferenceTest, TextPromptsEncodeAndContinue) {
  RAGKV_REQUIRE_MODEL_FILE("stories260K.text_reference.json");
  RAGKV_REQUIRE_MODEL_FILE("tok512.bin");
  const auto tref = nlohmann::json::parse(ReadFile(ModelFile("stories260K.text_reference.json")));
  // The .gguf carries its own vocabulary; the .bin uses tok512.bin.
  const std::string tok_path =
      GetParam() == "stories260K.gguf" ? ModelFile(GetParam()) : ModelFile("tok512.bin");
  auto tok = LoadTokenizer(tok_path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const auto& r : tref) {
    const std::string text = r["prompt_text"].get<std::string>();
    const auto want_ids = r["prompt_ids"].get<std::vector<int32_t>>();
    auto ids = (*tok)->Encode(text, /*add_bos=*/true, /*add_eos=*/false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, want_ids) << text;
    const auto want_cont = r["continuation_ids"].get<std::vector<int32_t>>();
    auto got = Generate(*model_, want_ids, static_cast<int>(want_cont.size()), SamplerOptions{});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want_cont) << text;
    std::string s;
    int32_t prev = want_ids.back();
    for (int32_t id : *got) {
      s += (*tok)->DecodePiece(prev, id);
      prev = id;
    }
    EXPECT_EQ(s, r["continuation_text"].get<std::string>()) << text;
  }
}

TEST_P(ReferenceTest, RunGenerateCliPrintsTextAndIds) {
  RAGKV_REQUIRE_MODEL_FILE("tok512.bin");
  GenerateOptions o;
  o.model_path = ModelFile(GetParam());
  if (GetParam() != "stories260K.gguf") o.tokenizer_path = ModelFile("tok512.bin");
  o.prompt = "Once upon a time";
  o.max_new = 27;
  std::ostringstream text;
  ASSERT_TRUE(RunGenerate(o, text).ok());
  EXPECT_EQ(text.str(), ", there was a little girl named Lily. She loved to play outside in the park.\n");
  o.print_ids = true;
  o.prompt.clear();
  o.prompt_ids = {1, 403, 407, 261, 378};
  o.max_new = 5;
  std::ostringstream ids;
  ASSERT_TRUE(RunGenerate(o, ids).ok());
  EXPECT_EQ(ids.str(), "432,383,286,261,376\n");
}

INSTANTIATE_TEST_SUITE_P(BinAndGguf, ReferenceTest,
                         ::testing::Values("stories260K.bin", "stories260K.gguf"),
                         [](const auto& info) {
                           return info.param == "stories260K.bin" ? std::string("Bin")
                                                                  : std::string("Gguf");
                         });

TEST(FingerprintTest, BinAndGgufAgreeAndAreStable) {
  RAGKV_REQUIRE_MODEL_FILE("stories260K.bin");
  RAGKV_REQUIRE_MODEL_FILE("stories260K.gguf");
  auto a = LoadModel(ModelFile("stories260K.bin"));
  auto b = LoadModel(ModelFile("stories260K.gguf"));
  auto a2 = LoadModel(ModelFile("stories260K.bin"));
  ASSERT_TRUE(a.ok() && b.ok() && a2.ok());
  EXPECT_EQ((*a)->fingerprint(), (*a2)->fingerprint());
  EXPECT_EQ((*a)->fingerprint_hex().size(), 32u);
  // Same weights and conventions (the GGUF stores the tied classifier as a
  // separate tensor with identical bytes) -> same fingerprint.
  EXPECT_EQ((*a)->fingerprint_hex(), (*b)->fingerprint_hex());
  // The KV dtype is part of it.
  LoadOptions lo;
  lo.kv_dtype = kernels::DType::kF32;
  auto c = LoadModel(ModelFile("stories260K.bin"), lo);
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*a)->fingerprint(), (*c)->fingerprint());
}

}  // namespace
}  // namespace ragkv::model
