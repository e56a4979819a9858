// redis_test_server.h: test fixtures that run real redis-server processes on
// 127.0.0.1 ephemeral ports: one standalone server, or a 3-master Redis
// Cluster. Header-only; used by tests/kvstore/redis_*_test.cc. The server
// process is testing::RedisServerProcess (tests/support/redis_server_process.h),
// shared with `ragkv bench ttft`.
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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kvstore/redis/internal/redis_client.h"
#include "tests/support/redis_server_process.h"
#include "tests/support/require.h"

namespace ragkv::kvstore::testing {

using internal::RedisConnection;
using internal::RedisConnectionOptions;
using internal::RedisEndpoint;
using internal::Reply;

// PickFreePort: a currently free TCP port on 127.0.0.1 (may race).
using ragkv::testing::PickFreeLoopbackPort;
using ragkv::testing::RedisServerOnPath;
using ragkv::testing::RedisServerProcess;

inline int PickFreePort() { return PickFreeLoopbackPort(); }

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

// RedisServer: one redis-server child process (tests/support/redis_server_process.h,
// shared with `ragkv bench ttft`).
using RedisServer = RedisServerProcess;

// RedisTestCluster: 3 masters, slots split evenly, no replicas.
class RedisTestCluster {
 public:
  // Start: `node_args(i)`, when set, adds arguments to node i's server
  // (e.g. a TLS port).
  static absl::StatusOr<std::unique_ptr<RedisTestCluster>> Start(
      const std::function<std::vector<std::string>(int)>& node_args = nullptr) {
    std::unique_ptr<RedisTestCluster> c(new RedisTestCluster());
    for (int i = 0; i < 3; ++i) {
      std::vector<std::string> args = {"--cluster-enabled", "yes", "--cluster-node-timeout", "15000",
                                       "--cluster-require-full-coverage", "no"};
      if (node_args) {
        std::vector<std::string> more = node_args(i);
        args.insert(args.end(), more.begin(), more.end());
      }
      absl::StatusOr<std::unique_ptr<RedisServer>> s = RedisServer::Start(args);
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
inline bool RedisServerAvailable() { return RedisServerOnPath(); }

// OwnRedisServerTest: a fixture with a private standalone server per test
// (skipped without redis-server).
class OwnRedisServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(RedisServerAvailable()) << "redis-server not installed";
    auto s = RedisServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  std::unique_ptr<RedisServer> server_;
};

}  // namespace ragkv::kvstore::testing

#endif  // RAGKV_TESTS_KVSTORE_REDIS_TEST_SERVER_H_
