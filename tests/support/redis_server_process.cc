#include "tests/support/redis_server_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kvstore/redis/internal/redis_client.h"

namespace ragkv::testing {

namespace internal = kvstore::internal;

int PickFreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = -1;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

bool RedisServerOnPath() {
  return std::system("redis-server --version >/dev/null 2>&1") == 0;
}

absl::StatusOr<std::unique_ptr<RedisServerProcess>> RedisServerProcess::Start(
    const std::vector<std::string>& extra_args) {
  absl::Status last = absl::UnknownError("not started");
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::unique_ptr<RedisServerProcess> s(new RedisServerProcess());
    s->extra_args_ = extra_args;
    last = s->Launch();
    if (last.ok()) return s;
  }
  return last;
}

RedisServerProcess::~RedisServerProcess() {
  Kill();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::string RedisServerProcess::endpoint() const { return absl::StrCat("127.0.0.1:", port_); }

void RedisServerProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
}

std::string RedisServerProcess::Log() const {
  std::string out;
  FILE* f = std::fopen((dir_ + "/server.log").c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

absl::Status RedisServerProcess::Restart() {
  Kill();
  return Launch();
}

absl::Status RedisServerProcess::Launch() {
  const std::vector<std::string>& extra_args = extra_args_;
  if (dir_.empty()) {
    char tmpl[] = "/tmp/ragkv-redis-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
    dir_ = tmpl;
  }
  if (port_ <= 0) port_ = PickFreeLoopbackPort();
  if (port_ <= 0) return absl::InternalError("no free port");
  std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_),
                                   "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                   "--daemonize", "no", "--dir", dir_,
                                   "--protected-mode", "no"};
  bool cluster = false;
  for (const std::string& a : extra_args) cluster |= (a == "--cluster-enabled");
  if (cluster) {
    if (cluster_port_ <= 0) cluster_port_ = PickFreeLoopbackPort();
    args.insert(args.end(), {"--cluster-port", std::to_string(cluster_port_),
                             "--cluster-config-file",
                             absl::StrCat(dir_, "/nodes-", port_, ".conf")});
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir_ + "/server.log";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execvp("redis-server", argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(absl::StrCat("redis-server exited: ", Log()));
    }
    // The server answering must be ours (not another one that won a race
    // for the port while ours failed to bind).
    internal::RedisConnectionOptions o;
    o.endpoint = internal::RedisEndpoint{"127.0.0.1", port_};
    o.connect_timeout = absl::Milliseconds(200);
    o.command_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<internal::RedisConnection>> c =
        internal::RedisConnection::Connect(o);
    if (c.ok()) {
      absl::StatusOr<internal::Reply> r = (*c)->Command({"INFO", "server"});
      if (r.ok() && r->IsString()) {
        if (absl::StrContains(internal::Sv(r->str()), absl::StrCat("process_id:", pid_, "\r\n"))) {
          return absl::OkStatus();
        }
        Kill();
        return absl::UnavailableError(
            absl::StrCat("port ", port_, " is served by another process"));
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  Kill();
  return absl::DeadlineExceededError("redis-server did not answer within 10 s");
}

}  // namespace ragkv::testing
