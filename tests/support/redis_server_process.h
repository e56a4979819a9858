// redis_server_process.h: RedisServerProcess, a private `redis-server` child
// on 127.0.0.1:<ephemeral port> -- for tests and benchmarks that need a real
// Redis (tests/kvstore's fixtures, the `serve --redis` recovery test,
// `ragkv bench ttft`'s Redis tier). Part of the test-support target
// (tests/support/), which tests and benches link; no library does.
//
// The child runs without persistence in its own temp dir (removed on
// destruction), dies with its parent (PR_SET_PDEATHSIG), and is only
// considered started once the server answering the port reports the child's
// own pid (a start that lost a port race is retried on a new port).
//
// Thread safety: a RedisServerProcess is used by one thread at a time.
#ifndef RAGKV_TESTS_SUPPORT_REDIS_SERVER_PROCESS_H_
#define RAGKV_TESTS_SUPPORT_REDIS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::testing {

// PickFreeLoopbackPort: a currently free TCP port on 127.0.0.1 (may race);
// -1 when none could be bound.
int PickFreeLoopbackPort();

// RedisServerOnPath: whether `redis-server` can be executed.
bool RedisServerOnPath();

class RedisServerProcess {
 public:
  // Start: launches redis-server with `extra_args` appended (with
  // "--cluster-enabled" among them, a cluster bus port and config file are
  // added); waits until it answers (up to 10 s). Retries on a new port up to
  // 4 times. Errors: Unavailable (exited, or another process answered),
  // DeadlineExceeded, Internal (fork / temp dir).
  static absl::StatusOr<std::unique_ptr<RedisServerProcess>> Start(
      const std::vector<std::string>& extra_args = {});
  ~RedisServerProcess();  // Kill() + removes the temp dir

  int port() const { return port_; }
  int cluster_port() const { return cluster_port_; }  // 0 unless a cluster node
  std::string endpoint() const;                        // "127.0.0.1:<port>"
  const std::string& dir() const { return dir_; }
  bool alive() const { return pid_ > 0; }

  // Kill: SIGKILL and reap (no-op if already dead).
  void Kill();
  // Restart: Kill(), then the same server again on the same port and dir,
  // empty (no persistence), like a replaced cache node. Errors as Start's
  // (no retry on another port: the port is the point).
  absl::Status Restart();
  // Log: the server's stdout/stderr so far (for failure messages).
  std::string Log() const;

 private:
  RedisServerProcess() = default;
  absl::Status Launch();

  std::vector<std::string> extra_args_;

  pid_t pid_ = -1;
  int port_ = 0;
  int cluster_port_ = 0;
  std::string dir_;
};

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_SUPPORT_REDIS_SERVER_PROCESS_H_
