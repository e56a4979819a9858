// ragkv's runtime against llama.cpp (pinned) on the same GGUF files:
// stories260K as shipped (all F32), and quantized by llama.cpp's own
// quantizer (llama_model_quantize) to Q8_0 and Q4_0 -- files that mix types
// per tensor, as every quantized download does (stories260K's 172-wide FFN
// rows are not whole 32-blocks, so llama.cpp falls back for them).
//
// Tolerances (measured, docs/llamacpp.md): F32 weights with f32 KV, both
// engines compute in f32: logits within 1e-3 absolute (|logit| <= ~20),
// greedy equal over 32 tokens; with both defaults (f16 KV) see below. Quantized files: ragkv dequantizes weights bit-exactly as ggml
// does and runs f32 activations, while llama.cpp's CPU kernels also quantize
// the activations (to q8_0 / q8_K blocks) for quantized weights, so logits
// differ by more: within 2% of the logit range, top-1 equal at >= 95% of
// teacher-forced positions, greedy continuations equal up to near ties.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/kv_cache.h"
#include "model/loader.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tests/llamacpp/compare_util.h"
#include "tests/model/test_util.h"
#include "tests/support/llamacpp_oracle.h"

namespace ragkv::model {
namespace {

using ::ragkv::model::testing::ModelFile;
using ::ragkv::testing::LlamaCppModel;

// Teacher-forced token sequence of the reference file (64 positions).
std::vector<int32_t> ReferenceTokens() {
  std::ifstream in(ModelFile("stories260K.reference.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<int32_t> t = j["logits"]["tokens"].get<std::vector<int32_t>>();
  if (t.size() > 64) t.resize(64);
  return t;
}

using ::ragkv::model::testing::Agreement;
using ::ragkv::model::testing::RagkvGreedy;
using ::ragkv::model::testing::RagkvLogits;

Agreement Compare(const std::vector<float>& a, const std::vector<float>& b, int vocab) {
  return ::ragkv::model::testing::CompareLogits(a, b, vocab);
}

class GgufOracleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_MODEL_FILE("stories260K.gguf");
    f32_ = ModelFile("stories260K.gguf");
  }
  std::string TempPath(const std::string& tag) const {
    return ::testing::TempDir() + "/ragkv_oracle_" + std::to_string(::getpid()) + "_" + tag + ".gguf";
  }
  std::string f32_;
};

// F32 weights, f32 KV in both engines: the same math in f32.
TEST_F(GgufOracleTest, F32LogitsAndGreedyMatchLlamaCpp) {
  auto ours = LoadModel(f32_, {.max_seq_len = 512, .kv_dtype = kernels::DType::kF32});
  ASSERT_TRUE(ours.ok()) << ours.status();
  auto theirs = LlamaCppModel::Load(f32_, {.kv_f32 = true});
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  const std::vector<int32_t> toks = ReferenceTokens();
  auto want = (*theirs)->Logits(toks, /*all=*/true);
  ASSERT_TRUE(want.ok()) << want.status();
  const Agreement g = Compare(RagkvLogits(**ours, toks), *want, (*ours)->config().vocab_size);
  EXPECT_LT(g.max_abs, 1e-3) << "range " << g.range;
  EXPECT_EQ(g.top1, 1.0);
  const std::vector<int32_t> prompt = {1, 403, 407};
  auto greedy = (*theirs)->Greedy(prompt, 32);
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(RagkvGreedy(**ours, prompt, 32), *greedy);
}

// Both engines' default: f16 KV. llama.cpp's attention also rounds Q and the
// softmax weights to f16 (its f16 x f32 matmul converts the f32 side), ragkv
// keeps them f32, so logits differ by ~0.02 of a ~41 range (measured); top-1
// and greedy continuations stay equal.
TEST_F(GgufOracleTest, F32WeightsF16KvMatchLlamaCppDefaults) {
  auto ours = LoadModel(f32_, {.max_seq_len = 512});
  ASSERT_TRUE(ours.ok()) << ours.status();
  auto theirs = LlamaCppModel::Load(f32_, {});
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  const std::vector<int32_t> toks = ReferenceTokens();
  auto want = (*theirs)->Logits(toks, true);
  ASSERT_TRUE(want.ok());
  const Agreement g = Compare(RagkvLogits(**ours, toks), *want, (*ours)->config().vocab_size);
  EXPECT_LT(g.max_abs, 0.005 * g.range);
  EXPECT_EQ(g.top1, 1.0);
  const std::vector<int32_t> prompt = {1, 403, 407};
  auto greedy = (*theirs)->Greedy(prompt, 32);
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(RagkvGreedy(**ours, prompt, 32), *greedy);
}

class QuantOracleTest : public GgufOracleTest, public ::testing::WithParamInterface<int> {};

TEST_P(QuantOracleTest, LlamaCppQuantizedFileMatchesLlamaCpp) {
  const int ftype = GetParam();
  const std::string q = TempPath("ftype" + std::to_string(ftype));
  ASSERT_TRUE(::ragkv::testing::LlamaCppQuantize(f32_, q, ftype).ok());
  auto ours = LoadModel(q, {.max_seq_len = 512});
  ASSERT_TRUE(ours.ok()) << ours.status();
  auto theirs = LlamaCppModel::Load(q, {});
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  auto f32 = LoadModel(f32_, {.max_seq_len = 512});
  ASSERT_TRUE(f32.ok());
  // A quantized file is a different model: a different fingerprint.
  EXPECT_NE((*ours)->fingerprint(), (*f32)->fingerprint());
  const std::vector<int32_t> toks = ReferenceTokens();
  auto want = (*theirs)->Logits(toks, true);
  ASSERT_TRUE(want.ok());
  const Agreement g = Compare(RagkvLogits(**ours, toks), *want, (*ours)->config().vocab_size);
  RecordProperty("max_abs", std::to_string(g.max_abs));
  RecordProperty("top1", std::to_string(g.top1));
  std::printf("ftype %d: max |logit diff| %.4f of range %.2f, top-1 agreement %.3f\n", ftype,
              g.max_abs, g.range, g.top1);
  EXPECT_LT(g.max_abs, 0.02 * g.range);
  EXPECT_GE(g.top1, 0.95);
  // Greedy continuations of the reference prompts. They must agree, or
  // diverge only at a near tie: where llama.cpp's own logits put ragkv's
  // pick within 2x the largest logit difference measured above of its top-1
  // (activation quantization decides such ties; it then follows a
  // different, equally valid path).
  std::ifstream in(ModelFile("stories260K.reference.json"));
  const nlohmann::json ref = nlohmann::json::parse(in);
  const int vocab = (*ours)->config().vocab_size;
  int agreed = 0, total = 0;
  for (const auto& c : ref["greedy"]) {
    std::vector<int32_t> prompt = c["prompt"].get<std::vector<int32_t>>();
    auto theirs_ids = (*theirs)->Greedy(prompt, 24);
    ASSERT_TRUE(theirs_ids.ok());
    const std::vector<int32_t> ours_ids = RagkvGreedy(**ours, prompt, 24);
    int k = 0;
    while (k < 24 && ours_ids[k] == (*theirs_ids)[k]) ++k;
    agreed += k;
    total += 24;
    if (k == 24) continue;
    prompt.insert(prompt.end(), ours_ids.begin(), ours_ids.begin() + k);
    auto at = (*theirs)->Logits(prompt, false);
    ASSERT_TRUE(at.ok());
    const float margin = (*at)[(*theirs_ids)[k]] - (*at)[ours_ids[k]];
    std::printf("ftype %d: diverges at token %d, llama.cpp margin %.4f\n", ftype, k, margin);
    EXPECT_LE(margin, 2 * g.max_abs) << "not a near tie at token " << k;
    ASSERT_EQ(at->size(), static_cast<size_t>(vocab));
  }
  std::printf("ftype %d: greedy agreement %d/%d tokens over %zu reference prompts\n", ftype,
              agreed, total, ref["greedy"].size());
  std::filesystem::remove(q);
}

INSTANTIATE_TEST_SUITE_P(Ftypes, QuantOracleTest, ::testing::Values(7 /*Q8_0*/, 2 /*Q4_0*/),
                         [](const auto& p) { return p.param == 7 ? "Q8_0" : "Q4_0"; });

// Bad input: a quantized tensor cut short names the file and the tensor.
TEST_F(GgufOracleTest, TruncatedQuantizedFileIsRefusedNamingTheTensor) {
  const std::string q = TempPath("trunc");
  ASSERT_TRUE(::ragkv::testing::LlamaCppQuantize(f32_, q, 7).ok());
  const auto size = std::filesystem::file_size(q);
  std::filesystem::resize_file(q, size - 1000);
  auto m = LoadModel(q, {.max_seq_len = 512});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(q), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("tensor"), std::string::npos) << m.status();
  std::filesystem::remove(q);
}

}  // namespace
}  // namespace ragkv::model
