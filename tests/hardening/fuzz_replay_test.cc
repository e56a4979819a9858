// Replays libFuzzer inputs through the exact fuzz target code (fuzz/*.cc,
// compiled here with the project compiler, and under ASan/UBSan in the CI
// sanitizer pass): every file in tests/hardening/fuzz_regressions/<target>/
// (crash reproducers found by scripts/fuzz, plus minimized seeds) must be
// handled without a crash, and the harness invariants (header round trip,
// validated documents) hold. Also runs each target on a few built-in inputs
// so the harnesses themselves cannot rot.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

// Each fuzz target's entry points, renamed so the six can share a binary.
#define LLVMFuzzerInitialize KvChunkInit
#define LLVMFuzzerTestOneInput KvChunkOne
#include "fuzz/kv_chunk_fuzzer.cc"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput CorpusOne
#include "fuzz/corpus_fuzzer.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput GgufOne
#include "fuzz/gguf_fuzzer.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput Llama2cOne
#include "fuzz/llama2c_fuzzer.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize TokJsonInit
#define LLVMFuzzerTestOneInput TokJsonOne
#include "fuzz/tokenizer_json_fuzzer.cc"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerInitialize SafetensorsInit
#define LLVMFuzzerTestOneInput SafetensorsOne
#include "fuzz/safetensors_fuzzer.cc"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput

namespace {

namespace fs = std::filesystem;
using OneInput = int (*)(const uint8_t*, size_t);

const std::map<std::string, OneInput>& Targets() {
  static const std::map<std::string, OneInput> t = {
      {"kv_chunk_fuzzer", &KvChunkOne},       {"corpus_fuzzer", &CorpusOne},
      {"gguf_fuzzer", &GgufOne},              {"llama2c_fuzzer", &Llama2cOne},
      {"tokenizer_json_fuzzer", &TokJsonOne}, {"safetensors_fuzzer", &SafetensorsOne},
  };
  return t;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

int RunInput(OneInput fn, const std::string& s) {
  return fn(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(FuzzReplay, RegressionInputsDoNotCrash) {
  const fs::path root = fs::path(RAGKV_SOURCE_DIR) / "tests/hardening/fuzz_regressions";
  int replayed = 0;
  for (const auto& [name, fn] : Targets()) {
    const fs::path dir = root / name;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
      SCOPED_TRACE(e.path().string());
      EXPECT_EQ(RunInput(fn, ReadAll(e.path())), 0);
      ++replayed;
    }
  }
  RecordProperty("replayed", replayed);
}

TEST(FuzzReplay, HarnessesAcceptEdgeInputs) {
  const std::vector<std::string> inputs = {
      "", std::string(1, '\0'), std::string(1, '\1'), std::string(7, '\xff'),
      std::string(300, '\0'), "GGUF\3\0\0\0", "{\"model\":{}}", "[{\"question\":1}]",
      "{\"text\":\"a\"}\n{\"text\":\"a\",\"id\":\"x\"}\n"};
  for (const auto& [name, fn] : Targets()) {
    for (const std::string& s : inputs) {
      SCOPED_TRACE(name);
      EXPECT_EQ(RunInput(fn, s), 0);
    }
  }
}

// The seed generators produce inputs the parsers accept (so the fuzzers
// start from deep, valid states), and the harness runs them cleanly.
TEST(FuzzReplay, GeneratedSeedsParse) {
  const std::string dir = ::testing::TempDir() + "/ragkv_fuzz_seeds_" + std::to_string(::getpid());
  fs::create_directories(dir);
  WriteSeeds(dir);  // kv_chunk_fuzzer's
  ragkv::fuzz::WriteFile(dir + "/tok.json", TinyBpeJson(true));
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string s = ReadAll(e.path());
    if (e.path().filename().string().rfind("seed_", 0) == 0) {
      EXPECT_EQ(RunInput(&KvChunkOne, s), 0);
      ++n;
    }
  }
  EXPECT_EQ(n, 24);
  auto tok = ragkv::model::LoadTokenizer(dir + "/tok.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  const std::string st = TinyLlamaSeed();
  EXPECT_EQ(RunInput(&SafetensorsOne, st), 0);
  // ... and the safetensors seed is a complete, loadable model.
  const std::string hf = dir + "/hf";
  fs::create_directories(hf);
  ragkv::fuzz::FuzzInput in(reinterpret_cast<const uint8_t*>(st.data()), st.size());
  ragkv::fuzz::WriteFile(hf + "/config.json", in.Take(in.U16()));
  ragkv::fuzz::WriteFile(hf + "/model.safetensors", in.Rest());
  auto parts = ragkv::model::LoadModelParts(hf);
  EXPECT_TRUE(parts.ok()) << parts.status();
  fs::remove_all(dir);
}

}  // namespace
