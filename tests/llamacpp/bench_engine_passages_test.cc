// `ragkv bench engine --passages` (bench/engine/bench_engine.h): "cut" sends
// `ragkv bench quality --task musique`'s prompts (each passage's tokens cut
// to --chunk-tokens, as documents), "chunker" the sidecar's first chunk of
// each passage text (word / sentence boundaries, at most --chunk-tokens).
// Issue 40: the two benches disagreed because they measured these two
// different prompt sets (docs/benchmarks.md, "Runtime and llama.cpp figures
// on the same prompts"). No timing is asserted.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/support/require.h"
#include "tests/support/source_dir.h"
#include "tests/support/run_command.h"

#ifdef RAGKV_BINARY
namespace {

std::string Shared(const char* env, const std::string& sub) {
  const char* e = std::getenv(env);
  return e != nullptr && *e != '\0' ? std::string(e) : RAGKV_SOURCE_DIR + "/../shared/" + sub;
}

// ContextTokens: samples.csv's context_tokens column (a line per strategy and
// prompt); *fallbacks counts rows whose fallback column is not empty.
std::vector<int> ContextTokens(const std::string& csv, int* fallbacks) {
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);  // header
  std::vector<int> out;
  *fallbacks = 0;
  while (std::getline(f, line)) {
    const std::vector<std::string> cols = absl::StrSplit(line, ',');
    if (cols.size() < 9) continue;
    out.push_back(std::stoi(cols[8]));
    if (line.find(",\"\",") == std::string::npos) ++*fallbacks;
  }
  return out;
}

std::string Command(const std::string& passages, const std::string& out_dir) {
  return absl::StrCat(RAGKV_BINARY, " bench engine --model ", Shared("RAGKV_TEST_MODELS", "models"),
                      "/stories260K.gguf --corpus ", Shared("RAGKV_TEST_CORPUS", "corpus"),
                      "/musique_dev.json --split dev --prompts 3 --chunks 2 --chunk-tokens 24 "
                      "--query-tokens 8 --ratios 0.5 --sidecar-query all --passages ",
                      passages, " --out-dir ", out_dir, " 2>/dev/null");
}

TEST(BenchEnginePassagesTest, CutSendsEveryPassageAtChunkTokensChunkerAtMost) {
  const std::string model = Shared("RAGKV_TEST_MODELS", "models") + "/stories260K.gguf";
  const std::string corpus = Shared("RAGKV_TEST_CORPUS", "corpus") + "/musique_dev.json";
  RAGKV_REQUIRE_OR_SKIP(std::ifstream(model).good()) << "no " << model;
  RAGKV_REQUIRE_OR_SKIP(std::ifstream(corpus).good()) << "no " << corpus;
  const std::string dir = ::testing::TempDir() + "/bench_engine_passages";
  std::string out, out2, out3;
  int fallbacks = 0;
  // [BOS] + 2 passages of exactly 24 tokens (MuSiQue passages are longer).
  ASSERT_EQ(ragkv::testing::RunCommand(Command("cut", dir + "/cut"), &out), 0) << out;
  const std::vector<int> cut = ContextTokens(dir + "/cut/samples.csv", &fallbacks);
  ASSERT_EQ(cut.size(), 3u * 4u) << out;  // 3 prompts x (prefill, prefix, reuse, r=0.5)
  for (int c : cut) EXPECT_EQ(c, 1 + 2 * 24);
  EXPECT_EQ(fallbacks, 0) << out;
  EXPECT_NE(out.find("passages cut, sent as documents"), std::string::npos) << out;

  ASSERT_EQ(ragkv::testing::RunCommand(Command("chunker", dir + "/chunker"), &out2), 0) << out2;
  const std::vector<int> chunker = ContextTokens(dir + "/chunker/samples.csv", &fallbacks);
  ASSERT_EQ(chunker.size(), cut.size()) << out2;
  bool shorter = false;
  for (int c : chunker) {
    EXPECT_LE(c, 1 + 2 * 24);
    shorter = shorter || c < 1 + 2 * 24;
  }
  EXPECT_TRUE(shorter) << "the chunker ends chunks at word ends: some first chunk is shorter";
  EXPECT_EQ(fallbacks, 0) << out2;

  EXPECT_NE(ragkv::testing::RunCommand(Command("sideways", dir + "/bad"), &out3), 0) << out3;
}

}  // namespace
#endif  // RAGKV_BINARY
