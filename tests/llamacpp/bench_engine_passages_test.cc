// `ragkv bench engine --passages` (bench/engine/bench_engine.h): "cut" sends
// `ragkv bench quality --task musique`'s prompts (each passage's tokens cut
// to --chunk-tokens, as documents), "chunker" the sidecar's first chunk of
// each passage text (word / sentence boundaries, at most --chunk-tokens).
// Issue 40: the two benches disagreed because they measured these two
// different prompt sets (docs/benchmarks.md, "Runtime and llama.cpp figures
// on the same prompts"). `bench quality --passages chunker` must build the
// chunker prompts bench engine gets from the sidecar. No timing is asserted.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/blend/bench_quality_corpus.h"
#include "gtest/gtest.h"
#include "model/loader.h"
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

  // `bench quality --passages chunker` (the runtime's prompts, chunked in
  // process) has the prompts bench engine got from the sidecar's catalogue
  // over gRPC: the same lengths, prompt by prompt; "cut" has 24 each.
  auto tk = ragkv::model::LoadTokenizer(model);
  ASSERT_TRUE(tk.ok()) << tk.status();
  for (const std::string passages : {"chunker", "cut"}) {
    ragkv::blend::CorpusPromptOptions co;
    co.path = corpus;
    co.prompts = 3;
    co.chunks = 2;
    co.chunk_tokens = 24;
    co.query_tokens = 8;
    co.passages = passages;
    auto cp = ragkv::blend::LoadCorpusPrompts(**tk, co);
    ASSERT_TRUE(cp.ok()) << cp.status();
    ASSERT_EQ(cp->prompts.size(), 3u);
    const std::vector<int>& engine = passages == "cut" ? cut : chunker;
    for (size_t i = 0; i < 3; ++i) {
      int ctx = 1;
      for (const auto& c : cp->prompts[i].chunks) ctx += static_cast<int>(c.size());
      EXPECT_EQ(ctx, engine[i * 4]) << passages << " prompt " << i;  // the first strategy's row
    }
  }
  ragkv::blend::CorpusPromptOptions bad;
  bad.path = corpus;
  bad.passages = "sideways";
  EXPECT_EQ(ragkv::blend::LoadCorpusPrompts(**tk, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
#endif  // RAGKV_BINARY
