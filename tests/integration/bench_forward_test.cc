// `ragkv bench ...` through the real binary: ragkv lists `bench` in its
// help and execs ragkv-bench (cli/forward.cc) with every argument after
// `bench`, preceded by the global flags given to ragkv; the exit code,
// stdout and stderr are ragkv-bench's own; without ragkv-bench, ragkv exits
// 2 naming the binary and how to build it (docs/architecture.md "Binaries").
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/client_util.h"

namespace ragkv::testing {
namespace {

// Sh: runs `cmd` (no single quotes) under sh, for at most 120 s; its stdout
// (the command redirects stderr as it needs), and the exit code in *rc.
std::string Sh(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen(absl::StrCat("timeout 120 sh -c '", cmd, "'").c_str(), "r");
  char buf[4096];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int st = p == nullptr ? -1 : ::pclose(p);
  *rc = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

TEST(BenchForwardTest, HelpListsBench) {
  int rc = 0;
  const std::string out = Sh(absl::StrCat(RAGKV_BINARY, " --help 2>&1"), &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("bench"), std::string::npos) << out;
}

// A stand-in for ragkv-bench (RAGKV_BENCH_BIN) that prints its arguments to
// stdout, a marker to stderr, and exits 7: what ragkv passes on is exactly
// what it received, and what the tool says and returns comes back as is.
TEST(BenchForwardTest, ForwardsArgumentsGlobalFlagsStreamsAndExitCode) {
  TempDir dir;
  const std::string stub = dir.path() + "/fake-bench";
  std::ofstream(stub) << "#!/bin/sh\necho \"args:$*\"\necho \"stderr-marker\" >&2\nexit 7\n";
  ASSERT_EQ(::chmod(stub.c_str(), 0755), 0);
  const std::string run = absl::StrCat("RAGKV_BENCH_BIN=", stub, " ", RAGKV_BINARY,
                                       " --kernel-threads 3 --log-level warning bench ttft "
                                       "--prompts 2 --help");
  int rc = 0;
  const std::string out = Sh(run + " 2>/dev/null", &rc);
  EXPECT_EQ(rc, 7);
  EXPECT_EQ(out, "args:--log-level warning --kernel-threads 3 ttft --prompts 2 --help\n");
  const std::string err = Sh(run + " 2>&1 >/dev/null", &rc);
  EXPECT_EQ(rc, 7);
  EXPECT_EQ(err, "stderr-marker\n");
  // No global flags given: none are added.
  EXPECT_EQ(Sh(absl::StrCat("RAGKV_BENCH_BIN=", stub, " ", RAGKV_BINARY, " bench kvstore 2>/dev/null"),
               &rc),
            "args:kvstore\n");
}

// The real ragkv-bench, found beside ragkv: its own help, and its own usage
// error with its exit code (no benchmark runs).
TEST(BenchForwardTest, RunsTheRealBenchBinary) {
  int rc = 0;
  std::string out = Sh(absl::StrCat(RAGKV_BINARY, " bench --help 2>&1"), &rc);
  EXPECT_EQ(rc, 0) << out;
  for (const char* family : {"ttft", "prefill", "kvstore", "quality", "engine"}) {
    EXPECT_NE(out.find(family), std::string::npos) << family << "\n" << out;
  }
  out = Sh(absl::StrCat(RAGKV_BINARY, " bench blend --kv-dtype f64 2>&1 >/dev/null"), &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("ragkv bench blend: --kv-dtype must be f32, f16 or bf16"), std::string::npos)
      << out;
}

TEST(BenchForwardTest, MissingBenchBinaryExits2NamingItAndTheBuildStep) {
  TempDir dir;
  int rc = 0;
  const std::string out =
      Sh(absl::StrCat("RAGKV_BENCH_BIN=", dir.path(), "/ragkv-bench ", RAGKV_BINARY,
                      " bench ttft 2>&1 >/dev/null"),
         &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(dir.path() + "/ragkv-bench"), std::string::npos) << out;
  EXPECT_NE(out.find("cmake --build build --target ragkv-bench"), std::string::npos) << out;
}

}  // namespace
}  // namespace ragkv::testing
