// GGUF F16 and v2: the test writes stories260K's weights as a minimal GGUF
// (metadata + tensors, F16 or F32, version 2 or 3) and checks the loaded
// model against the .bin.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/convert.h"
#include "model/loader.h"
#include "tests/model/test_util.h"
#include "tests/support/gguf_writer.h"

namespace ragkv::model {
namespace {

using ::ragkv::model::testing::ModelFile;

// WriteGguf: `p` as a GGUF; `extra` adds tensors the runtime does not read
// (e.g. Llama-3's rope_freqs.weight), as {name, values} 1-D F32 tensors.
void WriteGguf(const std::string& path, const ModelParts& p, bool f16, uint32_t version,
               const std::vector<std::pair<std::string, std::vector<float>>>& extra = {}) {
  ::ragkv::testing::LlamaGgufOptions o;
  o.f16 = f16;
  o.version = version;
  o.extra = extra;
  ::ragkv::testing::WriteLlamaGguf(p, o, path);
}

TEST(GgufWriterTest, F16AndV2LoadAndMatchBin) {
  RAGKV_REQUIRE_MODEL_FILE("stories260K.bin");
  auto parts = LoadModelParts(ModelFile("stories260K.bin"));
  ASSERT_TRUE(parts.ok());
  auto bin = LoadModel(ModelFile("stories260K.bin"));
  ASSERT_TRUE(bin.ok());
  const std::vector<int32_t> toks = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  const int vocab = parts->config.vocab_size;
  auto logits = [&](const Model& m) {
    auto kv = m.NewCache(64);
    Workspace ws;
    std::vector<float> l(toks.size() * vocab);
    EXPECT_TRUE(m.Prefill(toks, &*kv, &ws, LogitsMode::kAll, l.data()).ok());
    return l;
  };
  const auto want = logits(**bin);
  const std::string dir = ::testing::TempDir();
  for (bool f16 : {false, true}) {
    for (uint32_t version : {2u, 3u}) {
      const std::string path = dir + "/ragkv_w_" + std::to_string(::getpid()) + (f16 ? "_f16" : "_f32") +
                               std::to_string(version) + ".gguf";
      WriteGguf(path, *parts, f16, version);
      auto m = LoadModel(path);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_TRUE((*m)->config().shared_classifier);  // no output.weight
      const auto got = logits(**m);
      double err = 0;
      for (size_t i = 0; i < got.size(); ++i) err = std::max(err, double(std::abs(got[i] - want[i])));
      // f32: the same weights, but the GGUF's q/k/v stay three matrices (views of
      // the file) where the .bin's are one fused GEMM: other GEMM shapes, so
      // the last ulps differ (logits are O(10)).
      EXPECT_LT(err, f16 ? 0.05 : 1e-4) << (f16 ? "f16" : "f32") << " v" << version;
      if (!f16) {
        EXPECT_EQ((*m)->fingerprint(), (*bin)->fingerprint());
      }
      // No embedded vocabulary: the tokenizer load fails clearly.
      auto t = LoadTokenizer(path);
      EXPECT_FALSE(t.ok());
      std::filesystem::remove(path);
    }
  }
}

// A tensor the runtime would not read changes the math of engines that do:
// the file is refused, naming the tensor. Llama-3.1/3.2's rope_freqs.weight
// (once ignored: loaded fine, wrong logits) is now read: all-ones factors
// give the logits of no factors under another fingerprint; a wrong length
// is refused naming it.
TEST(GgufWriterTest, UnreadTensorsAreRefusedAndRopeFreqsAreRead) {
  RAGKV_REQUIRE_MODEL_FILE("stories260K.bin");
  auto parts = LoadModelParts(ModelFile("stories260K.bin"));
  ASSERT_TRUE(parts.ok());
  const std::string path =
      ::testing::TempDir() + "/ragkv_ropefreqs_" + std::to_string(::getpid()) + ".gguf";
  const int half = parts->config.head_dim / 2;
  WriteGguf(path, *parts, false, 3, {{"blk.0.attn_sinks.weight", std::vector<float>(4, 0.0f)}});
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("blk.0.attn_sinks.weight"), std::string::npos) << m.status();

  auto plain = LoadModel(ModelFile("stories260K.bin"));
  ASSERT_TRUE(plain.ok());
  WriteGguf(path, *parts, false, 3, {{"rope_freqs.weight", std::vector<float>(half, 1.0f)}});
  m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().rope_scaling, "llama3");
  EXPECT_NE((*m)->fingerprint(), (*plain)->fingerprint());
  const std::vector<int32_t> toks = {1, 403, 407, 261, 378, 432};
  const int vocab = parts->config.vocab_size;
  std::vector<float> a(toks.size() * vocab), b(a.size());
  for (auto [model, out] : {std::pair{&**m, &a}, std::pair{&**plain, &b}}) {
    auto kv = model->NewCache(16);
    Workspace ws;
    ASSERT_TRUE(model->Prefill(toks, &*kv, &ws, LogitsMode::kAll, out->data()).ok());
  }
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;

  WriteGguf(path, *parts, false, 3, {{"rope_freqs.weight", std::vector<float>(half + 1, 1.0f)}});
  m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("rope_freqs.weight"), std::string::npos) << m.status();
  WriteGguf(path, *parts, false, 3, {{"rope_freqs.weight", std::vector<float>(half, -1.0f)}});
  m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("rope_freqs"), std::string::npos) << m.status();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ragkv::model
