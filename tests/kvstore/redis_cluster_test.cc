// Tests of Redis Cluster routing (kvstore/redis/internal/redis_cluster.h): CRC16 and
// key slots against the spec's vectors and against a real cluster's
// CLUSTER KEYSLOT, slot discovery, MOVED (stale map) and ASK (live slot
// migration) redirects, on a real 3-master cluster on 127.0.0.1.
#include "kvstore/redis/internal/redis_cluster.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/kvstore/redis_test_server.h"
#include "tests/support/require.h"

namespace ragkv::kvstore::internal {
namespace {

using testing::RedisCommandOnce;
using testing::RedisTestCluster;

TEST(RedisKeySlotTest, SpecVectors) {
  // CRC16/XMODEM check value (Redis cluster spec, appendix A).
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("hello"), 866);
  // Hash tags (spec examples).
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("{user1000}.followers"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") & 16383);  // empty tag: whole key
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));            // tag is "{bar"
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));             // first tag only
  EXPECT_EQ(KeySlot("foo{bar"), Crc16("foo{bar") & 16383);         // unclosed: whole key
}

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(testing::RedisServerAvailable()) << "redis-server not installed";
    auto c = RedisTestCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
  }
  RedisClusterOptions Options(int seed_node = 0) {
    RedisClusterOptions o;
    o.seeds.push_back(RedisEndpoint{"127.0.0.1", cluster_->node(seed_node).port()});
    o.min_refresh_interval = absl::ZeroDuration();
    return o;
  }
  std::unique_ptr<RedisTestCluster> cluster_;
};

TEST_F(RedisClusterTest, KeySlotMatchesServerAndRoutingHitsOwner) {
  auto rc = RedisCluster::Create(Options(1));  // any node works as a seed
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ((*rc)->Masters().size(), 3u);
  EXPECT_EQ((*rc)->NodeForSlot(0)->port, cluster_->node(0).port());
  EXPECT_EQ((*rc)->NodeForSlot(16383)->port, cluster_->node(2).port());

  std::mt19937 rng(7);
  std::vector<std::string> keys = {"", "{", "}", "{}", "a{b}c", "\xff\x00\x01"};
  for (int i = 0; i < 300; ++i) {
    std::string k(rng() % 24, '\0');
    for (char& ch : k) ch = static_cast<char>(rng() % 4 == 0 ? "{}:"[rng() % 3] : rng());
    keys.push_back(k);
  }
  // Naive reference: the server's own CLUSTER KEYSLOT.
  for (const std::string& k : keys) {
    auto r = RedisCommandOnce(cluster_->node(0).port(), {"CLUSTER", "KEYSLOT", k});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(KeySlot(k), r->integer()) << "key bytes size " << k.size();
  }
  // Writes through the router land on the node that owns the slot and are
  // readable through the router (no redirects with a fresh map).
  for (int i = 0; i < 60; ++i) {
    std::string k = absl::StrCat("route:", i), v = absl::StrCat("v", i);
    auto w = (*rc)->Command(k, {"SET", k, v});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_FALSE(w->IsError()) << w->str();
    int owner = cluster_->NodeIndexForPort((*rc)->NodeForSlot(KeySlot(k))->port);
    ASSERT_GE(owner, 0);
    auto direct = RedisCommandOnce(cluster_->node(owner).port(), {"GET", k});
    ASSERT_TRUE(direct.ok());
    EXPECT_EQ(direct->str(), v);
  }
  EXPECT_EQ((*rc)->moved_redirects(), 0);
}

TEST_F(RedisClusterTest, StaleSlotMapFollowsMovedAndLearns) {
  auto rc = RedisCluster::Create(Options());
  ASSERT_TRUE(rc.ok()) << rc.status();
  const std::string key = "{chunk}:h";
  const int slot = KeySlot(key);
  RedisEndpoint owner = *(*rc)->NodeForSlot(slot);
  int wrong = (cluster_->NodeIndexForPort(owner.port) + 1) % 3;
  RedisEndpoint wrong_ep{"127.0.0.1", cluster_->node(wrong).port()};
  (*rc)->SetSlotOwnerForTesting(slot, wrong_ep);

  std::vector<RedisArgv> cmds = {{"SET", "{chunk}:L0", "layer0"}, {"SET", key, "hdr"},
                                 {"GET", "{chunk}:L0"}, {"GET", key}};
  auto r = (*rc)->Pipeline(key, cmds);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[2].str(), "layer0");
  EXPECT_EQ((*r)[3].str(), "hdr");
  EXPECT_GE((*rc)->moved_redirects(), 1);
  EXPECT_EQ((*rc)->NodeForSlot(slot)->port, owner.port) << "slot map not corrected";
  const int64_t moved = (*rc)->moved_redirects();
  ASSERT_TRUE((*rc)->Command(key, {"GET", key}).ok());
  EXPECT_EQ((*rc)->moved_redirects(), moved);  // learned: no more redirects
}

TEST_F(RedisClusterTest, AskDuringSlotMigrationThenMovedAfter) {
  auto rc = RedisCluster::Create(Options());
  ASSERT_TRUE(rc.ok()) << rc.status();
  const std::string tag = "{mig}";
  const std::string k_old = tag + ":old", k_new = tag + ":new";
  const int slot = KeySlot(k_old);
  const std::string slot_s = std::to_string(slot);
  int src = cluster_->NodeIndexForPort((*rc)->NodeForSlot(slot)->port);
  int dst = (src + 1) % 3;
  ASSERT_TRUE((*rc)->Command(k_old, {"SET", k_old, "before"}).ok());
  auto src_id = cluster_->NodeId(src), dst_id = cluster_->NodeId(dst);
  ASSERT_TRUE(src_id.ok() && dst_id.ok());
  int sp = cluster_->node(src).port(), dp = cluster_->node(dst).port();
  // Start migrating the slot src -> dst and move k_old over.
  auto r = RedisCommandOnce(dp, {"CLUSTER", "SETSLOT", slot_s, "IMPORTING", *src_id});
  ASSERT_TRUE(r.ok() && !r->IsError()) << (r.ok() ? std::string(r->str()) : r.status().ToString());
  r = RedisCommandOnce(sp, {"CLUSTER", "SETSLOT", slot_s, "MIGRATING", *dst_id});
  ASSERT_TRUE(r.ok() && !r->IsError()) << (r.ok() ? std::string(r->str()) : r.status().ToString());
  r = RedisCommandOnce(sp, {"MIGRATE", "127.0.0.1", std::to_string(dp), k_old, "0", "5000"});
  ASSERT_TRUE(r.ok() && !r->IsError()) << (r.ok() ? std::string(r->str()) : r.status().ToString());

  // k_old is now on dst; the source answers ASK, the router follows with
  // ASKING. A new key is also created on dst (ASK for a missing key).
  std::vector<RedisArgv> cmds = {{"GET", k_old}, {"SET", k_new, "fresh"}, {"GET", k_new}};
  auto got = (*rc)->Pipeline(k_old, cmds);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].str(), "before");
  EXPECT_EQ((*got)[1].str(), "OK");
  EXPECT_EQ((*got)[2].str(), "fresh");
  EXPECT_GE((*rc)->ask_redirects(), 2);
  EXPECT_EQ((*rc)->NodeForSlot(slot)->port, sp) << "ASK must not change the slot map";

  // Finish the migration on every node: the next access gets MOVED.
  for (int i = 0; i < 3; ++i) {
    r = RedisCommandOnce(cluster_->node(i).port(), {"CLUSTER", "SETSLOT", slot_s, "NODE", *dst_id});
    ASSERT_TRUE(r.ok() && !r->IsError()) << (r.ok() ? std::string(r->str()) : r.status().ToString());
  }
  auto after = (*rc)->Command(k_new, {"GET", k_new});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->str(), "fresh");
  EXPECT_GE((*rc)->moved_redirects(), 1);
  EXPECT_EQ((*rc)->NodeForSlot(slot)->port, dp);
}

TEST_F(RedisClusterTest, KilledNodeIsUnavailableOthersKeepServing) {
  RedisClusterOptions o = Options();
  o.node.connection.connect_timeout = absl::Milliseconds(200);
  auto rc = RedisCluster::Create(o);
  ASSERT_TRUE(rc.ok()) << rc.status();
  // One key per node.
  std::vector<std::string> keys(3);
  for (int i = 0, found = 0; found < 3; ++i) {
    std::string k = absl::StrCat("kill:", i);
    int n = cluster_->NodeIndexForPort((*rc)->NodeForSlot(KeySlot(k))->port);
    if (keys[n].empty()) {
      keys[n] = k;
      ++found;
    }
  }
  for (const auto& k : keys) ASSERT_TRUE((*rc)->Command(k, {"SET", k, "x"}).ok());
  cluster_->node(1).Kill();
  auto dead = (*rc)->Command(keys[1], {"GET", keys[1]});
  EXPECT_TRUE(absl::IsUnavailable(dead.status())) << dead.status();
  for (int n : {0, 2}) {
    auto ok = (*rc)->Command(keys[n], {"GET", keys[n]});
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(ok->str(), "x");
  }
}

TEST(RedisClusterCreateTest, StandaloneServerIsFailedPrecondition) {
  RAGKV_REQUIRE_OR_SKIP(testing::RedisServerAvailable()) << "redis-server not installed";
  auto s = testing::RedisServer::Start();
  ASSERT_TRUE(s.ok()) << s.status();
  RedisClusterOptions o;
  o.seeds.push_back(RedisEndpoint{"127.0.0.1", (*s)->port()});
  auto rc = RedisCluster::Create(o);
  EXPECT_TRUE(absl::IsFailedPrecondition(rc.status())) << rc.status();
}

}  // namespace
}  // namespace ragkv::kvstore::internal
