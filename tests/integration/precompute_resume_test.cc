// `ragkv precompute --data-dir` killed with kill -9 (a real child process)
// and restarted completes with every chunk stored exactly once and none
// corrupt.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/exec_args.h"
#include "gtest/gtest.h"
#include "model/loader.h"
#include "retrieval/retriever.h"
#include "services/backends.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

// RunPrecompute: forks/execs the ragkv binary; kills it with SIGKILL after
// `kill_after` (if > 0). Returns the exit status (or -9) and stdout.
int RunPrecompute(const std::vector<std::string>& args, absl::Duration kill_after,
                  std::string* out) {
  std::vector<std::string> argv = {RAGKV_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const ExecArgs exec(std::move(argv));  // before fork (base/exec_args.h)
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    exec.Exec();
    _exit(127);
  }
  close(pipefd[1]);
  if (kill_after > absl::ZeroDuration()) {
    absl::SleepFor(kill_after);
    kill(pid, SIGKILL);
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) out->append(buf, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return WEXITSTATUS(status);
}

uint64_t Field(const std::string& out, const std::string& after) {
  size_t p = out.find(after);
  if (p == std::string::npos) return ~0ull;
  return std::stoull(out.substr(p + after.size()));
}

TEST(PrecomputeResumeTest, KillNineThenResumeStoresEveryChunkOnce) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found";
  TempDir dir;
  WriteCorpus(dir.path() + "/corpus", 10);
  const std::vector<std::string> base = {
      "precompute", "--corpus", dir.path() + "/corpus", "--model", TestModelPath(),
      "--data-dir", dir.path() + "/data", "--max-seq-len", "512", "--chunk-tokens", "48"};
  std::vector<std::string> slow = base;
  slow.push_back("--debug-chunk-delay-ms");
  slow.push_back("100");
  std::string out1;
  const int rc1 = RunPrecompute(slow, absl::Milliseconds(2000), &out1);
  EXPECT_EQ(rc1, -SIGKILL) << out1;

  std::string out2;
  ASSERT_EQ(RunPrecompute(base, absl::ZeroDuration(), &out2), 0) << out2;
  const uint64_t total = Field(out2, "chunks     ");
  const uint64_t computed = Field(out2, "total, ");
  const uint64_t skipped = Field(out2, "computed, ");
  ASSERT_NE(total, ~0ull) << out2;
  EXPECT_GT(total, 10u);
  EXPECT_EQ(computed + skipped, total) << out2;
  EXPECT_NE(out2.find("0 failed"), std::string::npos) << out2;
  // The killed run stored some chunks (if the machine was too slow to store
  // any before the kill, the resume is trivially complete).
  if (skipped == 0) GTEST_LOG_(WARNING) << "killed run stored nothing before SIGKILL";

  // A third run finds everything stored.
  std::string out3;
  ASSERT_EQ(RunPrecompute(base, absl::ZeroDuration(), &out3), 0) << out3;
  EXPECT_EQ(Field(out3, "computed, "), total) << out3;

  // Every chunk reads back verified (checksums) under the model fingerprint.
  services::BackendOptions bo;
  bo.data_dir = dir.path() + "/data";
  bo.model_path = TestModelPath();
  bo.max_seq_len = 512;
  bo.chunk_tokens = 48;
  auto b = services::BuildBackends(bo);
  ASSERT_TRUE(b.ok()) << b.status();
  auto stats = (*b)->retriever->stats();
  std::set<kvstore::ChunkKey> keys;  // identical passages share one key
  int verified = 0;
  for (int64_t id = 0; id < stats.chunks + 64; ++id) {
    auto ch = (*b)->retriever->GetChunk(id);
    ASSERT_TRUE(ch.ok());
    if (!*ch) continue;
    auto key = kvstore::ChunkKey::Of((*b)->model->fingerprint(), (*ch)->token_ids);
    if (!keys.insert(key).second) continue;
    auto got = (*b)->store->Get(key, (*b)->model->fingerprint());
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value()) << "chunk " << id << " missing";
    ++verified;
  }
  EXPECT_EQ(static_cast<uint64_t>(verified), total);
  EXPECT_EQ((*b)->store->Stats().corrupt_records, 0u);
}

}  // namespace
}  // namespace ragkv::testing
