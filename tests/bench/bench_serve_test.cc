// bench_serve_test.cc: `ragkv bench serve` end to end on stories260K and
// the MuSiQue passages: it starts the two ragkv servers (and llama-server
// when `scripts/setup-llamacpp --server` built it; otherwise it says so and
// runs without), drives them with a few streaming requests, and prints one
// `serve ...` line per server x workload x concurrency. Checked: every line
// parses, no request failed, the stored passages are reused by "ragkv" and
// not by "ragkv-local" (llama.cpp prefills everything), the quality line,
// and the CSV/JSON files. No timing is asserted.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/support/require.h"
#include "tests/support/run_command.h"
#include "tests/support/source_dir.h"

namespace {

namespace fs = std::filesystem;

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v ? v : fallback;
}
std::string ModelPath() {
  return Env("RAGKV_TEST_MODELS", RAGKV_SOURCE_DIR + "/../shared/models") + "/stories260K.gguf";
}
std::string CorpusPath() {
  return Env("RAGKV_TEST_CORPUS", RAGKV_SOURCE_DIR + "/../shared/corpus") + "/musique_dev.json";
}
std::string LlamaServerPath() {
  return Env("RAGKV_LLAMACPP_DIR",
             Env("XDG_CACHE_HOME", Env("HOME", "/root") + "/.cache") + "/ragkv/llamacpp-3.21.1") +
         "/server-build/bin/llama-server";
}

// Cell: one parsed `serve server=... workload=... clients=N ...` line.
struct Cell {
  std::string server, workload;
  int clients = 0, errors = -1;
  double ttft_p50 = 0, ttft_p99 = 0, rps = 0, cached_frac = -1;
};

std::vector<Cell> ParseCells(const std::string& out) {
  static const std::regex kLine(
      R"(serve server=(\S+) workload=(\S+) clients=(\d+) ttft_p50_ms=([\d.]+) )"
      R"(ttft_p99_ms=([\d.]+) e2e_p50_ms=([\d.]+) rps=([\d.]+) out_tok_s=([\d.]+) )"
      R"(cached_frac=([\d.]+) errors=(\d+))");
  std::vector<Cell> cells;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.rfind("serve server=", 0) != 0) continue;
    EXPECT_TRUE(std::regex_match(line, m, kLine)) << "unparsable: " << line;
    if (m.empty()) continue;
    cells.push_back({m[1], m[2], std::stoi(m[3]), std::stoi(m[10]), std::stod(m[4]),
                     std::stod(m[5]), std::stod(m[7]), std::stod(m[9])});
  }
  return cells;
}

TEST(BenchServeTest, RagkvServersEndToEnd) {
  RAGKV_REQUIRE_OR_SKIP(fs::exists(ModelPath())) << "no test model at " << ModelPath();
  RAGKV_REQUIRE_OR_SKIP(fs::exists(CorpusPath())) << "no corpus at " << CorpusPath();
  const bool llama_server = fs::exists(LlamaServerPath());
  if (!llama_server) {
    std::printf(
        "llama-server not built (%s; scripts/setup-llamacpp --server): the two ragkv "
        "servers only\n",
        LlamaServerPath().c_str());
  }
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("ragkv-bench-serve-test-", ::getpid());
  fs::create_directories(dir);
  const std::string servers = llama_server ? "ragkv,ragkv-local,llama-server" : "ragkv,ragkv-local";
  const std::string cmd = absl::StrCat(
      RAGKV_BINARY, " bench serve --model ", ModelPath(), " --corpus ", CorpusPath(), " --servers ",
      servers, " --clients 1,2 --requests 4 --warmup 1 --repeats 1 --slots 2",
      " --ctx-per-slot 512 --passage-tokens 48 --k 6 --threads 1 --max-tokens 4", " --out-dir ",
      (dir / "out").string(), " --work-dir ", (dir / "work").string(), " 2>",
      (dir / "progress.log").string());
  std::string out;
  const int rc = ragkv::testing::RunCommand(cmd, &out);
  std::string progress;
  ragkv::testing::RunCommand("tail -c 6000 " + (dir / "progress.log").string(), &progress);
  ASSERT_EQ(rc, 0) << out << "\n--- stderr tail:\n" << progress;

  const std::vector<Cell> cells = ParseCells(out);
  const int n_servers = llama_server ? 3 : 2;
  // Per server: recombine at 1 and 2 clients, same-prompt, new-question.
  ASSERT_EQ(cells.size(), 4u * n_servers) << out;
  std::map<std::string, const Cell*> by;
  for (const Cell& c : cells) {
    EXPECT_EQ(c.errors, 0) << c.server << " " << c.workload << "\n" << out;
    EXPECT_GT(c.ttft_p50, 0) << out;
    EXPECT_GE(c.ttft_p99, c.ttft_p50) << out;
    EXPECT_GT(c.rps, 0) << out;
    by[absl::StrCat(c.server, "/", c.workload, "/", c.clients)] = &c;
  }
  // The run's passages were precomputed into "ragkv": its prompts reuse
  // them; "ragkv-local" prefills everything.
  ASSERT_TRUE(by.count("ragkv/recombine/1") && by.count("ragkv-local/recombine/1")) << out;
  EXPECT_GT(by["ragkv/recombine/1"]->cached_frac, 0.3) << out;
  EXPECT_EQ(by["ragkv-local/recombine/1"]->cached_frac, 0) << out;

  static const std::regex kQuality(
      R"(serve quality server=ragkv vs=ragkv-local first_token_agreement=([\d.]+) n=(\d+))");
  std::smatch q;
  ASSERT_TRUE(std::regex_search(out, q, kQuality)) << out;
  EXPECT_EQ(std::stoi(q[2]), 4 + 4 + 1 + 1) << out;  // every measured request, matched by index
  EXPECT_LE(std::stod(q[1]), 1.0);

  std::ifstream csv(dir / "out" / "serve.csv");
  int rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  EXPECT_EQ(rows, 1 + 4 * n_servers);
  std::ifstream json(dir / "out" / "serve.json");
  std::stringstream js;
  js << json.rdbuf();
  EXPECT_NE(js.str().find("\"cells\""), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
