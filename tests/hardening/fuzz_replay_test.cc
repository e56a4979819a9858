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
#include <limits>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/source_dir.h"

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
#ifdef RAGKV_HAVE_PROTO_FUZZER
#define LLVMFuzzerInitialize ProtoRequestInit
#define LLVMFuzzerTestOneInput ProtoRequestOne
#include "fuzz/proto_request_fuzzer.cc"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput
#endif

namespace {

namespace fs = std::filesystem;
using OneInput = int (*)(const uint8_t*, size_t);

const std::map<std::string, OneInput>& Targets() {
  static const std::map<std::string, OneInput> t = {
      {"kv_chunk_fuzzer", &KvChunkOne},       {"corpus_fuzzer", &CorpusOne},
      {"gguf_fuzzer", &GgufOne},              {"llama2c_fuzzer", &Llama2cOne},
      {"tokenizer_json_fuzzer", &TokJsonOne}, {"safetensors_fuzzer", &SafetensorsOne},
#ifdef RAGKV_HAVE_PROTO_FUZZER
      {"proto_request_fuzzer", &ProtoRequestOne},
#endif
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
      const std::string input = ReadAll(e.path());
      EXPECT_EQ(RunInput(fn, input), 0);
      ++replayed;
#ifdef RAGKV_HAVE_PROTO_FUZZER
      // A kept request input (corpus-TT-...) selects message type TT
      // directly, so appending a type to the fuzzer changes none of them.
      const std::string file = e.path().filename().string();
      if (name == "proto_request_fuzzer" && file.rfind("corpus-", 0) == 0 && !input.empty()) {
        EXPECT_EQ(static_cast<uint8_t>(input[0]), std::stoi(file.substr(7, 2)));
      }
#endif
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
  EXPECT_EQ(n, 48);  // 3 dtypes x 4 codecs x 2 compressions x 2 seeds each
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

#ifdef RAGKV_HAVE_PROTO_FUZZER
// The protobuf request seeds are valid requests: every one passes the
// handlers' validation (so the fuzzer starts past the first checks); and
// invalid requests are rejected (negative controls).
TEST(FuzzReplay, ProtoRequestSeedsValidate) {
  namespace prf = proto_request_fuzz;
  const std::string dir =
      ::testing::TempDir() + "/ragkv_proto_seeds_" + std::to_string(::getpid());
  fs::create_directories(dir);
  prf::WriteProtoSeeds(dir);
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string s = ReadAll(e.path());
    ASSERT_GE(s.size(), 2u);
    SCOPED_TRACE(e.path().filename().string());
    EXPECT_EQ(RunInput(&ProtoRequestOne, s), 0);
    const auto type = static_cast<prf::Type>(static_cast<uint8_t>(s[0]) % prf::kNumTypes);
    const uint8_t flags = static_cast<uint8_t>(s[1]);
    if (type == prf::kPutChunk) {
      ragkv::fuzz::FuzzInput in(reinterpret_cast<const uint8_t*>(s.data()) + 2, s.size() - 2);
      ragkv::services::internal::PutChunkAssembler a;
      while (in.remaining() > 0) {
        ragkv::v1::KVRecord rec;
        std::string_view b = in.Take(in.U16());
        ASSERT_TRUE(rec.ParseFromArray(b.data(), static_cast<int>(b.size())));
        ASSERT_TRUE(a.Add(std::move(rec)).ok());
      }
      ASSERT_TRUE(a.Encode().ok());
    } else {
      auto m = prf::NewMessage(type);
      ASSERT_TRUE(m->ParseFromArray(s.data() + 2, static_cast<int>(s.size() - 2)));
      EXPECT_TRUE(prf::Validate(type, *m, prf::VocabOf(flags)).ok());
    }
    ++n;
  }
  EXPECT_EQ(n, 16);
  fs::remove_all(dir);

  // Negative controls: invalid requests are rejected with INVALID_ARGUMENT.
  ragkv::v1::GetChunkRequest g;
  g.set_key("short");
  EXPECT_EQ(prf::Validate(prf::kGetChunk, g, 0).code(), absl::StatusCode::kInvalidArgument);
  ragkv::v1::BlendRequest b;
  b.add_segments()->mutable_tokens()->add_ids(600);
  EXPECT_TRUE(prf::Validate(prf::kBlend, b, 0).ok());
  EXPECT_EQ(prf::Validate(prf::kBlend, b, 512).code(), absl::StatusCode::kInvalidArgument);
  b.mutable_options()->set_recompute_ratio(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(prf::Validate(prf::kBlend, b, 0).code(), absl::StatusCode::kInvalidArgument);
  b.mutable_options()->set_recompute_ratio(0.2f);
  b.mutable_options()->set_mode(static_cast<ragkv::v1::BlendMode>(77));
  EXPECT_EQ(prf::Validate(prf::kBlend, b, 0).code(), absl::StatusCode::kInvalidArgument);
  b.mutable_options()->set_mode(ragkv::v1::BLEND_MODE_FULL_REUSE);
  b.add_segments()->set_chunk_id(4);
  EXPECT_EQ(prf::Validate(prf::kBlend, b, 0).code(), absl::StatusCode::kInvalidArgument);
  ragkv::v1::SearchRequest sr;
  sr.set_k(3);
  sr.mutable_vector()->add_values(std::numeric_limits<float>::infinity());
  EXPECT_EQ(prf::Validate(prf::kSearch, sr, 0).code(), absl::StatusCode::kInvalidArgument);
  ragkv::v1::StartJobRequest sj;
  sj.mutable_corpus()->add_paths("docs");
  EXPECT_TRUE(prf::Validate(prf::kStartJob, sj, 0).ok());
  sj.mutable_corpus()->set_neighbours(ragkv::services::kMaxJobNeighbours + 1);
  EXPECT_EQ(prf::Validate(prf::kStartJob, sj, 0).code(), absl::StatusCode::kInvalidArgument);
  sj.mutable_corpus()->set_neighbours(0);
  sj.mutable_corpus()->add_paths("");
  EXPECT_EQ(prf::Validate(prf::kStartJob, sj, 0).code(), absl::StatusCode::kInvalidArgument);
  ragkv::v1::LookupRequest lk;
  for (int i = 0; i <= ragkv::services::kMaxKeysPerCall; ++i) lk.add_keys(std::string(16, 'k'));
  EXPECT_EQ(prf::Validate(prf::kLookup, lk, 0).code(), absl::StatusCode::kInvalidArgument);
}
#endif

}  // namespace
