// process.h: a server under test as a child process of `ragkv bench serve`:
// started with its argv and extra environment, its stdout and stderr
// appended to a log file, killed (SIGTERM, then SIGKILL after a grace) on
// Stop or destruction, and killed with its parent (PR_SET_PDEATHSIG).
// Plus the loopback helpers the bench needs: a free port, a GET.
//
// Thread safety: a ChildProcess belongs to one thread.
#ifndef RAGKV_BENCH_SERVE_PROCESS_H_
#define RAGKV_BENCH_SERVE_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::bench_serve {

class ChildProcess {
 public:
  // Start: fork + exec argv[0] (a path) with `env` added ("NAME=value").
  // Errors: fork failure. An exec failure shows as an exit (Alive false)
  // and a line in the log.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::vector<std::string>& env,
                                                             const std::string& log_path);
  ~ChildProcess();

  // Alive: the child has not exited.
  bool Alive();
  // Log: the log file's contents so far.
  std::string Log() const;
  // WaitForLog: until the log contains `needle` (true), the child exits or
  // `timeout_s` pass (false).
  bool WaitForLog(const std::string& needle, double timeout_s);
  // Wait: the exit code once the child exits (-1: a signal, or still
  // running after `timeout_s`, then it is killed).
  int Wait(double timeout_s);
  // Stop: SIGTERM, then SIGKILL after `grace_s`; reaps the child.
  void Stop(double grace_s = 10);
  pid_t pid() const { return pid_; }
  // RssMb: the child's resident set (VmRSS) in MiB; -1 when unreadable.
  double RssMb() const;
  // CpuSeconds: user + system CPU time the child has used; -1 when unreadable.
  double CpuSeconds() const;

 private:
  ChildProcess(pid_t pid, std::string log) : pid_(pid), log_path_(std::move(log)) {}
  pid_t pid_;
  std::string log_path_;
  bool reaped_ = false;
  int status_ = 0;
};

// FreeLoopbackPort: a port that was free on 127.0.0.1 a moment ago (bind to
// port 0, read it, close). Errors: socket calls.
absl::StatusOr<int> FreeLoopbackPort();

// HttpGet: status and body of GET http://127.0.0.1:port/path (timeout
// seconds); status -1 on a transport error.
std::pair<int, std::string> HttpGet(int port, const std::string& path, double timeout_s = 5);

// WaitHealthy: until GET /health answers 200 (true), `child` exits or
// `timeout_s` pass (false).
bool WaitHealthy(ChildProcess* child, int port, double timeout_s);

}  // namespace ragkv::bench_serve

#endif  // RAGKV_BENCH_SERVE_PROCESS_H_
