// redis_security_test.cc: the Redis tier's deployment settings against real
// redis-server processes: TLS (verified server certificate, client
// certificates, wrong CA / wrong name refused), AUTH with an ACL user and
// with the legacy password, the shared byte budget, and address parsing.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/redis/redis_tier.h"
#include "tests/kvstore/redis_test_server.h"
#include "tests/kvstore/test_util.h"
#include "tests/support/require.h"
#include "tests/support/test_certs.h"

namespace ragkv::kvstore {
namespace {

using testing::ChunkSpec;
using testing::MakeChunk;
using testing::RedisServer;

std::string TempDir() {
  char tmpl[] = "/tmp/ragkv-tls-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

// Put then read back one chunk through `tier`; returns the read's status.
absl::Status RoundTrip(RedisTier& tier, uint64_t seed) {
  ChunkSpec spec;
  spec.token_seed = static_cast<uint32_t>(seed);
  testing::TestChunk c = MakeChunk(spec);
  if (absl::Status s = tier.Put(c.key, c.encoded); !s.ok()) return s;
  absl::StatusOr<Tier::Blob> h = tier.GetHeader(c.key);
  if (!h.ok()) return h.status();
  if (!h->has_value() || (*h)->view() != c.encoded->header) {
    return absl::DataLossError("header differs after the round trip");
  }
  absl::StatusOr<std::vector<Tier::Blob>> layers =
      testing::ReadLayers(tier, c.key, 0, static_cast<uint32_t>(c.encoded->layers.size()));
  if (!layers.ok()) return layers.status();
  for (size_t i = 0; i < layers->size(); ++i) {
    if (!(*layers)[i].has_value() || (*layers)[i]->view() != c.encoded->layers[i]) {
      return absl::DataLossError(absl::StrCat("layer ", i, " differs after the round trip"));
    }
  }
  return absl::OkStatus();
}

class RedisTlsTest : public ::testing::Test {
 protected:
  // One PKI for the suite (four RSA keys cost about a second).
  static void SetUpTestSuite() {
    if (!testing::RedisServerAvailable()) return;
    dir_ = TempDir();
    certs_status_ = new absl::StatusOr<ragkv::testing::TestCerts>(ragkv::testing::MakeTestCerts(dir_));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
    delete certs_status_;
    certs_status_ = nullptr;
  }
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(testing::RedisServerAvailable()) << "redis-server not installed";
    ASSERT_TRUE(certs_status_ != nullptr && certs_status_->ok())
        << (certs_status_ ? certs_status_->status().ToString() : "no certificates");
    certs_ = **certs_status_;
    tls_port_ = ragkv::testing::PickFreeLoopbackPort();
    auto s = RedisServer::Start({"--tls-port", std::to_string(tls_port_), "--tls-cert-file",
                                 certs_.server_cert, "--tls-key-file", certs_.server_key,
                                 "--tls-ca-cert-file", certs_.ca, "--tls-auth-clients",
                                 "optional"});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  RedisTierOptions Tls() const {
    RedisTierOptions o;
    o.endpoints = {absl::StrCat("127.0.0.1:", tls_port_)};
    o.key_prefix = absl::StrCat("tls-", ::getpid());
    o.tls.enabled = true;
    o.tls.ca_file = certs_.ca;
    o.connect_timeout = absl::Seconds(2);
    return o;
  }

  static inline std::string dir_;
  static inline absl::StatusOr<ragkv::testing::TestCerts>* certs_status_ = nullptr;
  ragkv::testing::TestCerts certs_;
  int tls_port_ = 0;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(RedisTlsTest, VerifiedServerRoundTripsWithAndWithoutClientCert) {
  auto plain = RedisTier::Create(Tls());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(RoundTrip(**plain, 1).ok());
  RedisTierOptions o = Tls();
  o.tls.cert_file = certs_.client_cert;
  o.tls.key_file = certs_.client_key;
  o.tls.server_name = "localhost";  // a DNS SAN instead of the IP
  auto mutual = RedisTier::Create(o);
  ASSERT_TRUE(mutual.ok()) << mutual.status();
  EXPECT_TRUE(RoundTrip(**mutual, 2).ok());
}

// TLS to a Redis Cluster (tls-cluster yes): the tier discovers the slot map
// over TLS, the nodes announce their TLS ports, and chunks routed to every
// master round-trip verified.
TEST_F(RedisTlsTest, ClusterOverTlsRoutesToEveryMaster) {
  // The TLS ports are picked here, so a port taken by another process
  // between the pick and the bind (parallel tests) is retried with new ones.
  int tls_ports[3] = {0, 0, 0};
  absl::StatusOr<std::unique_ptr<testing::RedisTestCluster>> cluster =
      absl::UnavailableError("not started");
  for (int attempt = 0; attempt < 4 && !cluster.ok(); ++attempt) {
    for (int& port : tls_ports) port = ragkv::testing::PickFreeLoopbackPort();
    cluster = testing::RedisTestCluster::Start([&](int i) {
      return std::vector<std::string>{"--tls-port", std::to_string(tls_ports[i]), "--tls-cluster",
                                      "yes", "--tls-cert-file", certs_.server_cert, "--tls-key-file",
                                      certs_.server_key, "--tls-ca-cert-file", certs_.ca,
                                      "--tls-auth-clients", "optional"};
    });
  }
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  RedisTierOptions o = Tls();
  o.endpoints = {absl::StrCat("127.0.0.1:", tls_ports[1])};  // one seed finds the others
  o.mode = RedisMode::kCluster;
  auto t = RedisTier::Create(o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->cluster_mode());
  std::set<int> masters;
  for (uint32_t i = 0; i < 24; ++i) {
    ChunkSpec spec;
    spec.token_seed = 700 + i;
    testing::TestChunk c = MakeChunk(spec);
    ASSERT_TRUE((*t)->Put(c.key, c.encoded).ok()) << i;
    absl::StatusOr<Tier::Blob> h = (*t)->GetHeader(c.key);
    ASSERT_TRUE(h.ok() && h->has_value()) << i;
    EXPECT_TRUE((*h)->view() == c.encoded->header) << i;
  }
  // Every master holds some of them (their plain ports answer DBSIZE).
  for (int i = 0; i < 3; ++i) {
    auto r = testing::RedisCommandOnce((*cluster)->node(i).port(), {"DBSIZE"});
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->integer() > 0) masters.insert(i);
  }
  EXPECT_EQ(masters.size(), 3u);
}

TEST_F(RedisTlsTest, UntrustedOrMisnamedServerIsRefused) {
  RedisTierOptions o = Tls();
  o.tls.ca_file = certs_.other_ca;
  auto untrusted = RedisTier::Create(o);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_TRUE(absl::StrContains(untrusted.status().message(), "certificate verify failed"))
      << untrusted.status();
  o = Tls();
  o.tls.server_name = "redis.example.com";
  auto misnamed = RedisTier::Create(o);
  ASSERT_FALSE(misnamed.ok());
  EXPECT_TRUE(absl::StrContains(misnamed.status().message(), "redis.example.com"))
      << misnamed.status();
  o = Tls();
  o.tls.ca_file = dir_ + "/missing.pem";
  auto missing = RedisTier::Create(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument) << missing.status();
}

TEST_F(RedisTlsTest, PlainClientOnTlsPortAndTlsClientOnPlainPortFail) {
  RedisTierOptions o = Tls();
  o.tls.enabled = false;
  o.command_timeout = absl::Seconds(1);
  EXPECT_FALSE(RedisTier::Create(o).ok());
  o = Tls();
  o.endpoints = {server_->endpoint()};
  auto t = RedisTier::Create(o);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), "TLS")) << t.status();
}

TEST_F(RedisTlsTest, ClientCertificateRequiredByServer) {
  // A second server that insists on client certificates.
  auto port = ragkv::testing::PickFreeLoopbackPort();
  auto s = RedisServer::Start({"--tls-port", std::to_string(port), "--tls-cert-file",
                               certs_.server_cert, "--tls-key-file", certs_.server_key,
                               "--tls-ca-cert-file", certs_.ca, "--tls-auth-clients", "yes"});
  ASSERT_TRUE(s.ok()) << s.status();
  RedisTierOptions o = Tls();
  o.endpoints = {absl::StrCat("127.0.0.1:", port)};
  EXPECT_FALSE(RedisTier::Create(o).ok());  // no client certificate
  o.tls.cert_file = certs_.client_cert;
  o.tls.key_file = certs_.client_key;
  auto t = RedisTier::Create(o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(RoundTrip(**t, 3).ok());
}

class RedisAuthTest : public testing::OwnRedisServerTest {
 protected:
  void SetUp() override {
    testing::OwnRedisServerTest::SetUp();
    if (server_ == nullptr) return;  // skipped or failed
    // An ACL user, then the default user gets a password: unauthenticated
    // clients are refused from here on.
    for (const internal::RedisArgv& cmd :
         {internal::RedisArgv{"ACL", "SETUSER", "ragkv", "on", ">user-secret", "~*", "&*", "+@all"},
          internal::RedisArgv{"CONFIG", "SET", "requirepass", "legacy-secret"}}) {
      auto r = testing::RedisCommandOnce(server_->port(), cmd);
      ASSERT_TRUE(r.ok() && !r->IsError()) << (r.ok() ? std::string(r->str()) : r.status().ToString());
    }
  }
  RedisTierOptions Options() const {
    RedisTierOptions o;
    o.endpoints = {server_->endpoint()};
    o.key_prefix = "auth";
    return o;
  }
};

TEST_F(RedisAuthTest, AclUserAndLegacyPasswordWorkWrongOnesAreRefused) {
  RedisTierOptions o = Options();
  o.username = "ragkv";
  o.password = "user-secret";
  auto user = RedisTier::Create(o);
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_TRUE(RoundTrip(**user, 4).ok());

  o = Options();
  o.password = "legacy-secret";
  auto legacy = RedisTier::Create(o);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_TRUE(RoundTrip(**legacy, 5).ok());

  o.username = "ragkv";
  o.password = "wrong-secret";
  auto wrong = RedisTier::Create(o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied) << wrong.status();
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "'ragkv'"));
  EXPECT_FALSE(absl::StrContains(wrong.status().message(), "wrong-secret")) << "secret leaked";

  auto none = RedisTier::Create(Options());
  EXPECT_FALSE(none.ok());  // NOAUTH on PING
}

class RedisBudgetTest : public testing::OwnRedisServerTest {
 protected:
  RedisTierOptions Options(uint64_t budget) const {
    RedisTierOptions o;
    o.endpoints = {server_->endpoint()};
    o.key_prefix = "budget";
    o.budget_bytes = budget;
    return o;
  }
};

// ExpectSharedBudget: two tiers (two sidecars) of one namespace share one
// byte budget: the oldest chunks go first, what stays fits and reads back
// intact, deletes free their share.
void ExpectSharedBudget(const std::function<RedisTierOptions(uint64_t)>& options) {
  std::vector<testing::TestChunk> chunks;
  for (uint64_t i = 0; i < 12; ++i) {
    ChunkSpec spec;
    spec.token_seed = static_cast<uint32_t>(100 + i);
    chunks.push_back(MakeChunk(spec));
  }
  const uint64_t one = chunks[0].encoded->TotalBytes();
  // Room for about 4 chunks (each takes its bytes plus frames).
  const uint64_t budget = 4 * one + one / 2;
  auto a = RedisTier::Create(options(budget));
  auto b = RedisTier::Create(options(budget));
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < chunks.size(); ++i) {
    RedisTier& t = i % 2 == 0 ? **a : **b;  // two sidecars, one namespace
    ASSERT_TRUE(t.Put(chunks[i].key, chunks[i].encoded).ok());
    absl::SleepFor(absl::Milliseconds(2));  // distinct write times
  }
  std::vector<bool> present;
  for (const auto& c : chunks) {
    absl::StatusOr<bool> has = (*a)->Contains(c.key);
    ASSERT_TRUE(has.ok()) << has.status();
    present.push_back(*has);
  }
  // The newest chunks are there, the oldest gone, and what is there fits.
  int kept = 0;
  for (bool p : present) kept += p;
  EXPECT_GE(kept, 3);
  EXPECT_LE(kept, 4);
  for (size_t i = chunks.size() - 3; i < chunks.size(); ++i) EXPECT_TRUE(present[i]) << i;
  for (size_t i = 0; i + 5 < chunks.size(); ++i) EXPECT_FALSE(present[i]) << i;
  const TierStats sa = (*a)->Stats(), sb = (*b)->Stats();
  EXPECT_EQ(sa.capacity_bytes, budget);
  EXPECT_LE(sb.bytes_used, budget);
  EXPECT_EQ(sa.evictions + sb.evictions, chunks.size() - kept);
  // Every surviving chunk reads back intact.
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!present[i]) continue;
    absl::StatusOr<Tier::Blob> h = (*b)->GetHeader(chunks[i].key);
    ASSERT_TRUE(h.ok() && h->has_value());
    EXPECT_TRUE((*h)->view() == chunks[i].encoded->header);
  }
  // Deleting frees its share of the account.
  const uint64_t before = (*b)->Stats().bytes_used;
  ASSERT_TRUE((*b)->Delete(chunks.back().key).ok());
  EXPECT_LT((*b)->Stats().bytes_used, before);
}

TEST_F(RedisBudgetTest, TwoSidecarsShareOneBudgetOldestChunksGoFirst) {
  ExpectSharedBudget([this](uint64_t budget) { return Options(budget); });
}

// The same on a 3-master Redis Cluster: the account's keys share one hash
// tag (one slot, so each update is one Lua script), the chunks spread over
// every master, and evictions delete on whichever master holds the victim.
TEST(RedisClusterBudgetTest, TwoSidecarsShareOneBudgetOnACluster) {
  RAGKV_REQUIRE_OR_SKIP(testing::RedisServerAvailable()) << "redis-server not installed";
  auto cluster = testing::RedisTestCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ExpectSharedBudget([&](uint64_t budget) {
    RedisTierOptions o;
    for (int i = 0; i < 3; ++i) o.endpoints.push_back(absl::StrCat("127.0.0.1:", (*cluster)->node(i).port()));
    o.mode = RedisMode::kCluster;
    o.key_prefix = "budget";
    o.budget_bytes = budget;
    return o;
  });
}

TEST_F(RedisBudgetTest, ChunkLargerThanTheBudgetIsResourceExhausted) {
  ChunkSpec spec;
  testing::TestChunk c = MakeChunk(spec);
  auto t = RedisTier::Create(Options(c.encoded->TotalBytes() / 2));
  ASSERT_TRUE(t.ok());
  absl::Status s = (*t)->Put(c.key, c.encoded);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  absl::StatusOr<bool> has = (*t)->Contains(c.key);
  ASSERT_TRUE(has.ok());
  EXPECT_FALSE(*has);
}

TEST(RedisAddressTest, ParsesSchemesListsAndRefusesCredentials) {
  RedisTierOptions o;
  ASSERT_TRUE(ParseRedisAddress("redis://127.0.0.1:7000,127.0.0.1:7001/", &o).ok());
  EXPECT_EQ(o.endpoints, (std::vector<std::string>{"127.0.0.1:7000", "127.0.0.1:7001"}));
  EXPECT_FALSE(o.tls.enabled);
  ASSERT_TRUE(ParseRedisAddress("rediss://cache.internal:6380", &o).ok());
  EXPECT_TRUE(o.tls.enabled);
  EXPECT_EQ(o.endpoints, (std::vector<std::string>{"cache.internal:6380"}));
  absl::Status cred = ParseRedisAddress("redis://u:pw@127.0.0.1:6379", &o);
  EXPECT_EQ(cred.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(absl::StrContains(cred.message(), "pw@")) << "secret echoed";
  EXPECT_FALSE(ParseRedisAddress("redis://127.0.0.1:6379/3", &o).ok());
  EXPECT_FALSE(ParseRedisAddress("", &o).ok());
  EXPECT_FALSE(ParseRedisAddress("127.0.0.1:99999", &o).ok());
}

}  // namespace
}  // namespace ragkv::kvstore
