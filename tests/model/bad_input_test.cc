// Bad input never crashes: truncated files, wrong magic, inconsistent dims,
// unsupported dtype/arch, missing tensors -> a clear error naming the file.
#include <filesystem>
#include <fstream>
#include <random>

#include "model/loader.h"
#include "tests/model/test_util.h"

namespace ragkv::model {
namespace {

namespace fs = std::filesystem;
using ::ragkv::model::testing::ModelFile;
using ::ragkv::model::testing::ReadFile;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/ragkv_bad_" + std::to_string(::getpid()) + "_" + name;
}

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Expects LoadModel(path) to fail with `code`, naming the file, and the
// message to contain `needle`.
void ExpectLoadError(const std::string& path, absl::StatusCode code, const std::string& needle) {
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok()) << path;
  EXPECT_EQ(m.status().code(), code) << m.status();
  EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status();
}

TEST(BadInputTest, MissingFileAndUnknownFormat) {
  EXPECT_EQ(LoadModel("/nonexistent/model.bin").status().code(), absl::StatusCode::kNotFound);
  const std::string p = TempPath("x.weights");
  Write(p, "hello");
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "unknown model format");
  fs::remove(p);
}

TEST(BadInputTest, Llama2cTruncatedAndInconsistent) {
  RAGKV_REQUIRE_MODEL_FILE("stories260K.bin");
  const std::string good = ReadFile(ModelFile("stories260K.bin"));
  const std::string p = TempPath("m.bin");
  for (size_t cut : {size_t{0}, size_t{10}, size_t{28}, size_t{1000}, good.size() - 4}) {
    Write(p, good.substr(0, cut));
    auto m = LoadModel(p);
    ASSERT_FALSE(m.ok()) << "cut " << cut;
    EXPECT_NE(m.status().message().find(p), std::string::npos) << m.status();
  }
  // Inconsistent dims: n_heads 7 does not divide dim 64.
  std::string bad = good;
  int32_t seven = 7;
  std::memcpy(&bad[12], &seven, 4);
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "n_heads");
  // A header that implies a different size (hidden_dim 200).
  bad = good;
  int32_t h200 = 200;
  std::memcpy(&bad[4], &h200, 4);
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "implies");
  // Garbage header.
  Write(p, std::string(4096, '\xff'));
  auto m = LoadModel(p);
  EXPECT_FALSE(m.ok());
  fs::remove(p);
}

TEST(BadInputTest, GgufCorruptions) {
  RAGKV_REQUIRE_MODEL_FILE("stories260K.gguf");
  const std::string good = ReadFile(ModelFile("stories260K.gguf"));
  const std::string p = TempPath("m.gguf");
  // Truncations at many points: header, metadata, tensor infos, data.
  for (size_t cut : {size_t{0}, size_t{3}, size_t{8}, size_t{30}, size_t{500}, size_t{9000},
                     size_t{14000}, size_t{200000}, good.size() - 1}) {
    Write(p, good.substr(0, cut));
    auto m = LoadModel(p);
    ASSERT_FALSE(m.ok()) << "cut " << cut;
    EXPECT_NE(m.status().message().find(p), std::string::npos) << m.status();
    auto t = LoadTokenizer(p);
    if (cut < 14000) {
      EXPECT_FALSE(t.ok()) << "cut " << cut;
    }
  }
  // Wrong magic.
  std::string bad = good;
  bad[0] = 'X';
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "magic");
  // Unsupported version.
  bad = good;
  uint32_t v9 = 9;
  std::memcpy(&bad[4], &v9, 4);
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kUnimplemented, "version");
  // Unsupported architecture: rename "llama" in general.architecture.
  bad = good;
  const size_t a = bad.find("general.architecture");
  ASSERT_NE(a, std::string::npos);
  const size_t val = bad.find("llama", a);
  bad.replace(val, 5, "gpt2x");
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kUnimplemented, "architecture");
  // Unsupported tensor type: set blk.0.attn_q.weight's ggml type to 16
  // (iq2_xxs), then to 12 (q4_K), whose 256-element blocks do not fit its
  // 64-element rows.
  bad = good;
  const std::string name = "blk.0.attn_q.weight";
  const size_t t = bad.find(name);
  ASSERT_NE(t, std::string::npos);
  const size_t type_off = t + name.size() + 4 + 2 * 8;  // n_dims u32, 2 dims u64
  uint32_t iq2 = 16;
  std::memcpy(&bad[type_off], &iq2, 4);
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kUnimplemented, "blk.0.attn_q.weight");
  ExpectLoadError(p, absl::StatusCode::kUnimplemented, "iq2_xxs");
  uint32_t q4k = 12;
  std::memcpy(&bad[type_off], &q4k, 4);
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "blk.0.attn_q.weight");
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "q4_K blocks");
  // Missing tensor: rename blk.3.ffn_up.weight.
  bad = good;
  const size_t u = bad.find("blk.3.ffn_up.weight");
  bad[u + 4] = '9';
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "missing tensor blk.3.ffn_up.weight");
  // Inconsistent dims: feed_forward_length metadata 172 -> 100.
  bad = good;
  const size_t f = bad.find("llama.feed_forward_length");
  ASSERT_NE(f, std::string::npos);
  uint32_t h100 = 100;
  std::memcpy(&bad[f + std::string("llama.feed_forward_length").size() + 4], &h100, 4);
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "has shape");
  // Absurd counts in the header.
  bad = good;
  uint64_t huge = uint64_t{1} << 60;
  std::memcpy(&bad[16], &huge, 8);
  Write(p, bad);
  ExpectLoadError(p, absl::StatusCode::kInvalidArgument, "more than");
  fs::remove(p);
}

TEST(BadInputTest, RandomByteFlipsNeverCrash) {
  // Flip bytes in the headers/metadata of both formats: every load either
  // succeeds or returns an error; none crashes or over-allocates.
  std::mt19937 rng(20261129);
  for (const char* f : {"stories260K.gguf", "stories260K.bin", "tok512.bin"}) {
    if (!::ragkv::model::testing::HaveModelFile(f)) continue;
    const std::string good = ReadFile(ModelFile(f));
    const std::string p = TempPath(std::string("flip_") + f);
    const size_t span = std::min<size_t>(good.size(), std::string(f).find(".gguf") != std::string::npos ? 14200 : 64);
    for (int i = 0; i < 150; ++i) {
      std::string bad = good;
      for (int k = 0; k < 3; ++k) bad[rng() % span] ^= static_cast<char>(1 + rng() % 255);
      Write(p, bad);
      if (std::string(f) == "tok512.bin") {
        (void)LoadTokenizer(p);
      } else {
        (void)LoadModel(p);
        if (std::string(f) == "stories260K.gguf") (void)LoadTokenizer(p);
      }
    }
    fs::remove(p);
  }
}

TEST(BadInputTest, ModelCreateRejectsMismatchedWeights) {
  auto parts = LoadModelParts("synthetic:layers=1,dim=16,heads=2,ffn=24,vocab=300");
  ASSERT_TRUE(parts.ok()) << parts.status();
  parts->weights.layers[0].wk.pop_back();
  auto m = Model::Create(parts->config, parts->weights);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("layers.0.wk"), std::string::npos) << m.status();
  ModelConfig c = parts->config;
  c.arch = "falcon";
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace ragkv::model
