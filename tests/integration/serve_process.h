// serve_process.h: the real `ragkv serve` binary (RAGKV_BINARY) as a child
// process of an integration test, for fault injection: start it on a free
// 127.0.0.1 port, wait until it answers gRPC health, SIGKILL it, restart it
// on the same data dir. Also a tiny HTTP GET for its /metrics and a parser
// for one Prometheus sample. Header-only; used by
// tests/integration/{put_storm_kill_test,redis_recovery_test}.cc.
#ifndef RAGKV_TESTS_INTEGRATION_SERVE_PROCESS_H_
#define RAGKV_TESTS_INTEGRATION_SERVE_PROCESS_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "connector/client.h"

namespace ragkv::testing {

// FreeLoopbackPort: a currently free TCP port on 127.0.0.1 (may race; the
// callers retry on a bind failure).
inline int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// Accepts: whether 127.0.0.1:port accepts a TCP connection now.
inline bool Accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// RagkvToExit: runs `ragkv <args>` (a shell word list) to its exit: stdout
// + stderr, and the exit code in *rc (124 when it was still running after
// 120 s). For commands that must fail.
inline std::string RagkvToExit(const std::string& args, int* rc) {
  const std::string cmd = absl::StrCat("timeout 120 ", RAGKV_BINARY, " ", args, " 2>&1");
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  *rc = p == nullptr ? -1 : WEXITSTATUS(::pclose(p));
  return out;
}

// ServeToExit: RagkvToExit of `serve <args>` (124: a startup that should
// have failed served instead). For startups that must fail.
inline std::string ServeToExit(const std::string& args, int* rc) {
  return RagkvToExit("serve " + args, rc);
}

// ServeProcess: one `ragkv serve` child. Killed (SIGKILL) on destruction.
class ServeProcess {
 public:
  // Start: `ragkv [global_args] serve --listen 127.0.0.1:<free> [--metrics-port
  // <free>] <args>`, stderr to `log_path`; returns once the server answers the
  // gRPC health check (up to 60 s: model loading on a loaded 2-core box).
  // Retries on new ports if the child exits early (port taken).
  static absl::StatusOr<std::unique_ptr<ServeProcess>> Start(const std::vector<std::string>& args,
                                                             const std::string& log_path,
                                                             bool with_metrics = false) {
    absl::Status last = absl::UnknownError("not started");
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::unique_ptr<ServeProcess> p(new ServeProcess());
      last = p->Launch(args, log_path, with_metrics);
      if (last.ok()) return p;
    }
    return last;
  }

  ~ServeProcess() { Kill9(); }

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  bool alive() const { return pid_ > 0; }
  int pid() const { return pid_; }

  // Kill9: SIGKILL and reap; returns the signal that ended it (or -1).
  int Kill9() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFSIGNALED(st) ? WTERMSIG(st) : -1;
  }

  // Terminate: SIGTERM (graceful drain) and reap; returns the exit code.
  int Terminate() {
    SignalTerm();
    return WaitExit();
  }

  // SignalTerm / WaitExit: Terminate in two steps (traffic may run between).
  void SignalTerm() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
  }
  int WaitExit() {
    if (pid_ <= 0) return -1;
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

  // Client: a connector client to this server (no retries: a fault test
  // must see every error), deadline per call `deadline`.
  std::unique_ptr<Client> NewClient(absl::Duration deadline = absl::Seconds(30)) const {
    ClientOptions co;
    co.target = address();
    co.default_deadline = deadline;
    co.max_attempts = 1;
    auto c = Client::Create(co);
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Metrics: the /metrics text (empty on failure).
  std::string Metrics() const {
    if (metrics_port_ <= 0) return "";
    httplib::Client cli("127.0.0.1", metrics_port_);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(10);
    auto r = cli.Get("/metrics");
    return (r && r->status == 200) ? r->body : std::string();
  }

 private:
  ServeProcess() = default;

  absl::Status Launch(const std::vector<std::string>& args, const std::string& log_path,
                      bool with_metrics) {
    port_ = FreeLoopbackPort();
    metrics_port_ = with_metrics ? FreeLoopbackPort() : -1;
    if (port_ <= 0 || (with_metrics && metrics_port_ <= 0)) {
      return absl::InternalError("no free port");
    }
    std::vector<std::string> full = {RAGKV_BINARY, "serve", "--listen",
                                     absl::StrCat("127.0.0.1:", port_), "--metrics-port",
                                     std::to_string(metrics_port_)};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(RAGKV_BINARY, argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    // The gRPC client is made once the port accepts connections: a channel
    // whose first connect is refused waits out gRPC's reconnect backoff (1 s,
    // growing) before it tries again.
    std::unique_ptr<Client> client;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::UnavailableError(absl::StrCat("ragkv serve exited early (see ", log_path, ")"));
      }
      if (client == nullptr && Accepts(port_)) client = NewClient(absl::Seconds(2));
      if (client != nullptr && client->HealthCheck("", absl::Seconds(2)).ok()) {
        return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    Kill9();
    return absl::DeadlineExceededError("ragkv serve not healthy within 60 s");
  }

  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = -1;
};

// MetricValue: the value of the sample `name{labels}` (labels exactly as
// rendered, e.g. `tier="redis"`; empty for none) in a Prometheus text page.
inline std::optional<double> MetricValue(const std::string& page, const std::string& name,
                                         const std::string& labels = "") {
  const std::string want = labels.empty() ? name : absl::StrCat(name, "{", labels, "}");
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (line.size() <= want.size() + 1 || line.substr(0, want.size()) != want ||
        line[want.size()] != ' ') {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(line.substr(want.size() + 1), &v)) return v;
  }
  return std::nullopt;
}

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_INTEGRATION_SERVE_PROCESS_H_
