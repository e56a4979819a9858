// redis_test_server.h: test fixtures that run real redis-server processes on
// 127.0.0.1 ephemeral ports: one standalone server, or a 3-master Redis
// Cluster. Header-only; used by tests/kvstore/redis_*_test.cc.
//
// Each server is a child process (fork + exec of `redis-server`, with
// PR_SET_PDEATHSIG so it dies with the test), no persistence, its own temp dir
// (removed on destruction). Ports are picked by binding 127.0.0.1:0; a start
// that loses a port race is retried on a new port.
#ifndef RAGKV_TESTS_KVSTORE_REDIS_TEST_SERVER_H_
#define RAGKV_TESTS_KVSTORE_REDIS_TEST_SERVER_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kvstore/internal/redis_client.h"

namespace ragkv::kvstore::testing {

using internal::RedisConnection;
using internal::RedisConnectionOptions;
using internal::RedisEndpoint;
using internal::Reply;

// PickFreePort: a currently free TCP port on 127.0.0.1 (may race).
inline int PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
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

// RedisCommandOnce: opens a connection to 127.0.0.1:port, runs one command.
inline absl::StatusOr<Reply> RedisCommandOnce(int port, const internal::RedisArgv& argv) {
  RedisConnectionOptions o;
  o.endpoint = RedisEndpoint{"127.0.0.1", port};
  o.connect_timeout = absl::Milliseconds(200);
  o.command_timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<RedisConnection>> c = RedisConnection::Connect(o);
  if (!c.ok()) return c.status();
  return (*c)->Command(argv);
}

// RedisServer: one redis-server child process.
class RedisServer {
 public:
  // Start: launches redis-server with `extra_args` appended; waits until it
  // answers PING (up to 10 s). Retries on a new port if the port was taken.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(
      const std::vector<std::string>& extra_args = {}) {
    absl::Status last = absl::UnknownError("not started");
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::unique_ptr<RedisServer> s(new RedisServer());
      last = s->Launch(extra_args);
      if (last.ok()) return s;
    }
    return last;
  }

  ~RedisServer() {
    Kill();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  int port() const { return port_; }
  int cluster_port() const { return cluster_port_; }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", port_); }
  const std::string& dir() const { return dir_; }
  bool alive() const { return pid_ > 0; }

  // Kill: SIGKILL and reap (no-op if already dead).
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  // Log: the server's stdout/stderr so far (for failure messages).
  std::string Log() const {
    std::string out;
    FILE* f = std::fopen((dir_ + "/server.log").c_str(), "r");
    if (f == nullptr) return out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
    return out;
  }

 private:
  RedisServer() = default;

  absl::Status Launch(const std::vector<std::string>& extra_args) {
    char tmpl[] = "/tmp/ragkv-redis-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
    dir_ = tmpl;
    port_ = PickFreePort();
    if (port_ <= 0) return absl::InternalError("no free port");
    std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_),
                                     "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                     "--daemonize", "no", "--dir", dir_,
                                     "--protected-mode", "no"};
    bool cluster = false;
    for (const std::string& a : extra_args) cluster |= (a == "--cluster-enabled");
    if (cluster) {
      cluster_port_ = PickFreePort();
      args.insert(args.end(), {"--cluster-port", std::to_string(cluster_port_),
                               "--cluster-config-file",
                               absl::StrCat(dir_, "/nodes-", port_, ".conf")});
    }
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string log = dir_ + "/server.log";
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::UnavailableError(absl::StrCat("redis-server exited: ", Log()));
      }
      // The server answering must be ours (not another test's that won a
      // race for the port while ours failed to bind).
      absl::StatusOr<Reply> r = RedisCommandOnce(port_, {"INFO", "server"});
      if (r.ok() && r->IsString()) {
        if (absl::StrContains(internal::Sv(r->str()), absl::StrCat("process_id:", pid_, "\r\n"))) {
          return absl::OkStatus();
        }
        Kill();
        return absl::UnavailableError(absl::StrCat("port ", port_, " is served by another process"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    Kill();
    return absl::DeadlineExceededError("redis-server did not answer PING within 10 s");
  }

  pid_t pid_ = -1;
  int port_ = 0;
  int cluster_port_ = 0;
  std::string dir_;
};

// RedisTestCluster: 3 masters, slots split evenly, no replicas.
class RedisTestCluster {
 public:
  static absl::StatusOr<std::unique_ptr<RedisTestCluster>> Start() {
    std::unique_ptr<RedisTestCluster> c(new RedisTestCluster());
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<std::unique_ptr<RedisServer>> s = RedisServer::Start(
          {"--cluster-enabled", "yes", "--cluster-node-timeout", "15000",
           "--cluster-require-full-coverage", "no"});
      if (!s.ok()) return s.status();
      c->nodes_.push_back(*std::move(s));
    }
    const int ranges[3][2] = {{0, 5460}, {5461, 10922}, {10923, 16383}};
    for (int i = 0; i < 3; ++i) {
      int p = c->nodes_[i]->port();
      std::string epoch = std::to_string(i + 1), lo = std::to_string(ranges[i][0]),
                  hi = std::to_string(ranges[i][1]);
      absl::StatusOr<Reply> r = RedisCommandOnce(p, {"CLUSTER", "SET-CONFIG-EPOCH", epoch});
      if (!r.ok()) return r.status();
      r = RedisCommandOnce(p, {"CLUSTER", "ADDSLOTSRANGE", lo, hi});
      if (!r.ok()) return r.status();
      if (r->IsError()) return absl::InternalError(absl::StrCat("ADDSLOTSRANGE: ", internal::Sv(r->str())));
    }
    for (int i = 1; i < 3; ++i) {
      std::string port = std::to_string(c->nodes_[i]->port());
      std::string cport = std::to_string(c->nodes_[i]->cluster_port());
      absl::StatusOr<Reply> r =
          RedisCommandOnce(c->nodes_[0]->port(), {"CLUSTER", "MEET", "127.0.0.1", port, cport});
      if (!r.ok()) return r.status();
      if (r->IsError()) return absl::InternalError(absl::StrCat("CLUSTER MEET: ", internal::Sv(r->str())));
    }
    absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      bool ok = true;
      for (auto& n : c->nodes_) {
        absl::StatusOr<Reply> r = RedisCommandOnce(n->port(), {"CLUSTER", "INFO"});
        ok = ok && r.ok() && absl::StrContains(internal::Sv(r->str()), "cluster_state:ok") &&
             absl::StrContains(internal::Sv(r->str()), "cluster_known_nodes:3");
        // Every node must also see all 16384 slots assigned.
        ok = ok && absl::StrContains(internal::Sv(r->str()), "cluster_slots_ok:16384");
      }
      if (ok) return c;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return absl::DeadlineExceededError("redis cluster did not reach cluster_state:ok in 20 s");
  }

  RedisServer& node(int i) { return *nodes_[i]; }
  int size() const { return static_cast<int>(nodes_.size()); }
  // NodeIndexForPort: which fixture node listens on `port` (-1 if none).
  int NodeIndexForPort(int port) const {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i]->port() == port) return static_cast<int>(i);
    return -1;
  }
  // NodeId: the cluster node id of node i.
  absl::StatusOr<std::string> NodeId(int i) {
    absl::StatusOr<Reply> r = RedisCommandOnce(nodes_[i]->port(), {"CLUSTER", "MYID"});
    if (!r.ok()) return r.status();
    return std::string(r->str());
  }

 private:
  RedisTestCluster() = default;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

// RedisServerAvailable: whether redis-server is on PATH.
inline bool RedisServerAvailable() { return std::system("redis-server --version >/dev/null 2>&1") == 0; }

}  // namespace ragkv::kvstore::testing

#endif  // RAGKV_TESTS_KVSTORE_REDIS_TEST_SERVER_H_
