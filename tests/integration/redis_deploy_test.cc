// `ragkv serve` against Redis as deployments run it (issue #21):
//  * a real 3-master Redis Cluster with a password (from a mode-600 file),
//    a key namespace and a TTL, shared by two sidecars: A writes through
//    (ram,ssd,redis), B relies on the shared tier alone (--kv-tiers redis).
//    A master is killed: B serves what the other masters hold and misses
//    the rest (never a wrong byte), /metrics counts the outage; the master
//    comes back empty, A writes again, and B serves everything again;
//  * a TLS Redis (verified against a private CA, client certificate) with
//    an ACL user: serve stores and reads through it, and a wrong password
//    or an untrusted CA stops serve at startup with a clear message that
//    never shows the secret.
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/probe_util.h"
#include "tests/integration/serve_process.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/integration/test_chunks.h"
#include "tests/kvstore/redis_test_server.h"
#include "tests/support/redis_server_process.h"
#include "tests/support/require.h"
#include "tests/support/test_certs.h"

namespace ragkv::testing {
namespace {

using kvstore::testing::RedisCommandOnce;
using kvstore::testing::RedisTestCluster;

constexpr int kChunks = 30;

std::string WriteSecret(const std::string& dir, const std::string& name, const std::string& v) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << v << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

double RedisMetric(const ServeProcess& s, const std::string& name) {
  return MetricValue(s.Metrics(), name, "tier=\"redis\"").value_or(-1);
}

// Authed: one command to a node that requires `password`.
absl::StatusOr<kvstore::internal::Reply> Authed(int port, const std::string& password,
                                                const kvstore::internal::RedisArgv& argv) {
  kvstore::internal::RedisConnectionOptions o;
  o.endpoint = kvstore::internal::RedisEndpoint{"127.0.0.1", port};
  o.password = password;
  auto c = kvstore::internal::RedisConnection::Connect(o);
  if (!c.ok()) return c.status();
  return (*c)->Command(argv);
}

// ReadAll: B's view of chunks 0..kChunks-1: how many were served (each must
// be byte-identical) and how many were misses; any other error fails.
std::pair<int, int> ReadAll(Client* c) {
  int served = 0, missed = 0;
  for (int id = 0; id < kChunks; ++id) {
    auto got = c->GetChunk(MakeTestChunk(id).header.key(), TestFingerprintBytes());
    if (got.ok()) {
      EXPECT_TRUE(SameChunk(MakeTestChunk(id), *got)) << "chunk " << id << " served wrong";
      ++served;
    } else {
      EXPECT_TRUE(absl::IsNotFound(got.status())) << id << ": " << got.status();
      ++missed;
    }
  }
  return {served, missed};
}

TEST(RedisDeployTest, ClusterWithPasswordNamespaceTtlSurvivesAMasterRestart) {
  RAGKV_REQUIRE_OR_SKIP(RedisServerOnPath()) << "redis-server not installed";
  TempDir dir;
  auto cluster_or = RedisTestCluster::Start();
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  RedisTestCluster& cluster = **cluster_or;
  const std::string password = "cluster-pw-7f3a";
  auto protect = [&](int i) {
    auto r = RedisCommandOnce(cluster.node(i).port(), {"CONFIG", "SET", "requirepass", password});
    ASSERT_TRUE(r.ok() && !r->IsError()) << i;
  };
  for (int i = 0; i < 3; ++i) protect(i);
  const std::string pw_file = WriteSecret(dir.path(), "redis.pw", password);
  const std::string seeds = absl::StrCat("redis://", cluster.node(0).endpoint(), ",",
                                         cluster.node(1).endpoint());
  auto serve = [&](const std::string& name, const std::string& tiers) {
    return ServeProcess::Start(
        {"--data-dir", dir.path() + "/" + name, "--services", "kvstore", "--redis", seeds,
         "--redis-mode", "cluster", "--redis-password-file", pw_file, "--redis-prefix", "team1",
         "--redis-ttl", "1h", "--kv-tiers", tiers, "--sync-writes", "false", "--workers", "2"},
        dir.path() + "/" + name + ".log", /*with_metrics=*/true);
  };
  auto a_or = serve("a", "ram,ssd,redis");
  ASSERT_TRUE(a_or.ok()) << a_or.status();
  auto b_or = serve("b", "redis");
  ASSERT_TRUE(b_or.ok()) << b_or.status();
  ServeProcess& a = **a_or;
  ServeProcess& b = **b_or;
  auto ca = a.NewClient();
  auto cb = b.NewClient();
  for (int id = 0; id < kChunks; ++id) ASSERT_TRUE(ca->PutChunk(MakeTestChunk(id)).ok()) << id;
  EXPECT_EQ(ReadAll(cb.get()), std::make_pair(kChunks, 0));

  // Every key is under the namespace, carries the TTL, and the chunks are
  // spread over the three masters.
  int masters_with_keys = 0;
  for (int i = 0; i < 3; ++i) {
    auto keys = Authed(cluster.node(i).port(), password, {"KEYS", "*"});
    ASSERT_TRUE(keys.ok()) << keys.status();
    masters_with_keys += keys->size() > 0;
    for (size_t k = 0; k < keys->size(); ++k) {
      const std::string key((*keys)[k].str());
      EXPECT_TRUE(absl::StartsWith(key, "team1:")) << key;
      auto ttl = Authed(cluster.node(i).port(), password, {"PTTL", key});
      ASSERT_TRUE(ttl.ok());
      EXPECT_GT(ttl->integer(), 0) << key;
      EXPECT_LE(ttl->integer(), 3600 * 1000) << key;
    }
  }
  EXPECT_EQ(masters_with_keys, 3);
  EXPECT_FALSE(absl::StrContains(ReadText(dir.path() + "/a.log"), password)) << "password logged";

  // A master dies: B serves the chunks on the other two, misses the rest.
  cluster.node(2).Kill();
  auto [served, missed] = ReadAll(cb.get());
  EXPECT_GT(served, 0);
  EXPECT_GT(missed, 0);
  EXPECT_GE(RedisMetric(b, "ragkv_tier_outages_total"), 1);
  EXPECT_GE(RedisMetric(b, "ragkv_tier_errors_total"), 1);
  for (int id = 0; id < kChunks; ++id) {  // A still has everything locally
    auto got = ca->GetChunk(MakeTestChunk(id).header.key(), TestFingerprintBytes());
    ASSERT_TRUE(got.ok()) << id << ": " << got.status();
    EXPECT_TRUE(SameChunk(MakeTestChunk(id), *got));
  }

  // It comes back empty (a replaced cache node): once A has rewritten the
  // chunks (replace: a plain duplicate Put is already_present in A's SSD),
  // B serves all of them.
  ASSERT_TRUE(cluster.node(2).Restart().ok());
  protect(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  std::pair<int, int> after{0, kChunks};
  while (absl::Now() < deadline) {
    for (int id = 0; id < kChunks; ++id) {
      StoredChunk again = MakeTestChunk(id);
      again.header.set_replace(true);  // A's SSD has it: rewrite every tier
      ca->PutChunk(again).IgnoreError();
    }
    after = ReadAll(cb.get());
    if (after.first == kChunks) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(after, std::make_pair(kChunks, 0)) << "not recovered 40 s after the restart";
  EXPECT_EQ(RedisMetric(b, "ragkv_tier_up"), 1);
  ca.reset();
  cb.reset();
  EXPECT_EQ(a.Terminate(), 0);
  EXPECT_EQ(b.Terminate(), 0);
  if (::testing::Test::HasFailure()) {  // failed once in CI (session 10) with no trace
    ADD_FAILURE() << "A's log:\n" << LogEvidence(dir.path() + "/a.log") << "\nB's log:\n"
                  << LogEvidence(dir.path() + "/b.log") << "\nkilled master's log:\n"
                  << cluster.node(2).Log().substr(0, 4000);
  }
}

TEST(RedisDeployTest, TlsWithAclUserServesAndBadCredentialsStopStartup) {
  RAGKV_REQUIRE_OR_SKIP(RedisServerOnPath()) << "redis-server not installed";
  TempDir dir;
  auto certs = MakeTestCerts(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.status();
  const int tls_port = PickFreeLoopbackPort();
  auto redis_or = RedisServerProcess::Start(
      {"--tls-port", std::to_string(tls_port), "--tls-cert-file", certs->server_cert,
       "--tls-key-file", certs->server_key, "--tls-ca-cert-file", certs->ca});
  ASSERT_TRUE(redis_or.ok()) << redis_or.status();
  auto acl = RedisCommandOnce((*redis_or)->port(), {"ACL", "SETUSER", "sidecar", "on",
                                                    ">acl-pw-91c2", "~*", "&*", "+@all"});
  ASSERT_TRUE(acl.ok() && !acl->IsError());
  const std::string good = WriteSecret(dir.path(), "good.pw", "acl-pw-91c2");
  const std::string bad = WriteSecret(dir.path(), "bad.pw", "not-the-pw-55");
  auto args = [&](const std::string& name, const std::string& pw, const std::string& ca) {
    return std::vector<std::string>{
        "--data-dir", dir.path() + "/" + name, "--services", "kvstore", "--redis",
        absl::StrCat("rediss://127.0.0.1:", tls_port), "--redis-user", "sidecar",
        "--redis-password-file", pw, "--redis-tls-ca", ca, "--redis-tls-cert",
        certs->client_cert, "--redis-tls-key", certs->client_key, "--kv-tiers", "redis",
        "--sync-writes", "false"};
  };
  {
    auto s = ServeProcess::Start(args("ok", good, certs->ca), dir.path() + "/ok.log");
    ASSERT_TRUE(s.ok()) << s.status();
    auto c = (*s)->NewClient();
    ASSERT_TRUE(c->PutChunk(MakeTestChunk(1)).ok());
    auto got = c->GetChunk(MakeTestChunk(1).header.key(), TestFingerprintBytes());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(SameChunk(MakeTestChunk(1), *got));
    c.reset();
    EXPECT_EQ((*s)->Terminate(), 0);
  }
  struct Bad {
    std::string name, pw, ca, says;
  };
  for (const Bad& b : {Bad{"badpw", bad, certs->ca, "AUTH as 'sidecar' rejected"},
                       Bad{"badca", good, certs->other_ca, "certificate verify failed"}}) {
    const std::string log = dir.path() + "/" + b.name + ".log";
    auto s = ServeProcess::Start(args(b.name, b.pw, b.ca), log);
    EXPECT_FALSE(s.ok()) << b.name << " started";
    const std::string text = ReadText(log);
    EXPECT_TRUE(absl::StrContains(text, b.says)) << b.name << ":\n" << text;
    EXPECT_FALSE(absl::StrContains(text, "not-the-pw-55")) << "password in the log";
  }
}

}  // namespace
}  // namespace ragkv::testing
