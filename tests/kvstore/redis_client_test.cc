// Tests of the hiredis client layer (kvstore/redis/internal/redis_client.h) against
// a real redis-server child process.
#include "kvstore/redis/internal/redis_client.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/kvstore/redis_test_server.h"
#include "tests/support/require.h"

namespace ragkv::kvstore::internal {
namespace {

using testing::RedisServer;

TEST(RedisEndpointTest, Parse) {
  auto ep = RedisEndpoint::Parse("127.0.0.1:6379");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, 6379);
  EXPECT_EQ(ep->ToString(), "127.0.0.1:6379");
  auto v6 = RedisEndpoint::Parse("[::1]:7000");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->ToString(), "[::1]:7000");
  for (const char* bad : {"", "host", ":6379", "host:", "host:0", "host:70000", "host:12x",
                          "[::1]7000", "[::1]:"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(RedisEndpoint::Parse(bad).status())) << bad;
  }
}

class RedisClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(testing::RedisServerAvailable()) << "redis-server not installed";
    auto s = RedisServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  RedisConnectionOptions Options() const {
    RedisConnectionOptions o;
    o.endpoint = RedisEndpoint{"127.0.0.1", server_->port()};
    return o;
  }
  std::unique_ptr<RedisServer> server_;
};

TEST_F(RedisClientTest, BinarySafeSetGetAndPipelineOrder) {
  auto conn = RedisConnection::Connect(Options());
  ASSERT_TRUE(conn.ok()) << conn.status();
  std::string value("a\0b\r\n\xff", 6);
  auto r = (*conn)->Command({"SET", "k", value});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->type(), ReplyType::kStatus);
  r = (*conn)->Command({"GET", "k"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->str(), value);
  r = (*conn)->Command({"GET", "missing"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->IsNil());

  // 200 SETs then 200 GETs in one pipeline: replies come back in order.
  std::vector<std::string> keys, vals;
  for (int i = 0; i < 200; ++i) {
    keys.push_back(absl::StrCat("key", i));
    vals.push_back(std::string(i, static_cast<char>('a' + i % 26)));
  }
  std::vector<RedisArgv> cmds;
  for (int i = 0; i < 200; ++i) cmds.push_back({"SET", keys[i], vals[i]});
  for (int i = 0; i < 200; ++i) cmds.push_back({"GET", keys[i]});
  auto replies = (*conn)->Pipeline(cmds);
  ASSERT_TRUE(replies.ok()) << replies.status();
  ASSERT_EQ(replies->size(), 400u);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ((*replies)[i].str(), "OK");
    EXPECT_EQ((*replies)[200 + i].str(), vals[i]);
  }
}

TEST_F(RedisClientTest, ErrorReplyIsAReplyNotAStatus) {
  auto conn = RedisConnection::Connect(Options());
  ASSERT_TRUE(conn.ok());
  auto r = (*conn)->Command({"NOSUCHCOMMAND", "x"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->IsError());
  absl::Status s = ReplyToStatus(r->view(), "test");
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  // The connection is still usable after an error reply.
  r = (*conn)->Command({"PING"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->str(), "PONG");
  EXPECT_FALSE((*conn)->broken());
}

TEST_F(RedisClientTest, LargeValueRoundTrip) {
  auto conn = RedisConnection::Connect(Options());
  ASSERT_TRUE(conn.ok());
  std::string big(20 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  auto r = (*conn)->Command({"SET", "big", big});
  ASSERT_TRUE(r.ok()) << r.status();
  r = (*conn)->Command({"GET", "big"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->str().size(), big.size());
  EXPECT_TRUE(r->str() == big);
}

TEST(RedisLargeBufferPoolTest, ReleasedBuffersAreReused) {
  const size_t idle_before = PooledBytesIdle();
  char* first = nullptr;
  size_t capacity = 0;
  {
    LargeBuffer b = AcquireLargeBuffer(3 << 20);
    ASSERT_NE(b.get(), nullptr);
    capacity = b.get_deleter().capacity;
    EXPECT_GE(capacity, size_t{3} << 20);
    first = b.get();
    b[(3 << 20) - 1] = 'x';  // writable over its whole size
  }
  if (idle_before + capacity > kMaxPooledBytes) GTEST_SKIP() << "pool already full";
  EXPECT_GE(PooledBytesIdle(), capacity);
  LargeBuffer again = AcquireLargeBuffer(3 << 20);
  EXPECT_EQ(again.get(), first);  // warm memory handed out again
}

TEST_F(RedisClientTest, CommandTimeoutIsDeadlineExceededAndBreaksConnection) {
  RedisConnectionOptions o = Options();
  o.command_timeout = absl::Milliseconds(100);
  auto conn = RedisConnection::Connect(o);
  ASSERT_TRUE(conn.ok());
  // BLPOP on an empty list blocks server-side for 1 s.
  auto r = (*conn)->Command({"BLPOP", "empty-list", "1"});
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_TRUE((*conn)->broken());
  EXPECT_TRUE(absl::IsUnavailable((*conn)->Command({"PING"}).status()));
}

TEST(RedisClientUnreachableTest, ConnectRefusedIsUnavailableWithEndpoint) {
  int port = testing::PickFreePort();  // nothing listens there
  RedisConnectionOptions o;
  o.endpoint = RedisEndpoint{"127.0.0.1", port};
  auto conn = RedisConnection::Connect(o);
  ASSERT_FALSE(conn.ok());
  EXPECT_TRUE(absl::IsUnavailable(conn.status())) << conn.status();
  EXPECT_NE(conn.status().message().find(o.endpoint.ToString()), std::string::npos)
      << conn.status();

  // The pool backs off: the second call fails fast without connecting again.
  RedisNodePoolOptions po;
  po.connection = o;
  po.reconnect_backoff_initial = absl::Seconds(10);
  RedisNodePool pool(po);
  auto r1 = pool.Command({"PING"});
  EXPECT_TRUE(absl::IsUnavailable(r1.status()));
  auto r2 = pool.Command({"PING"});
  EXPECT_TRUE(absl::IsUnavailable(r2.status()));
  EXPECT_NE(r2.status().message().find("backoff"), std::string::npos) << r2.status();
  EXPECT_EQ(pool.open_connections(), 0);
}

TEST_F(RedisClientTest, PoolRecoversFromServerSideConnectionKill) {
  RedisNodePoolOptions po;
  po.connection = Options();
  po.max_connections = 2;
  RedisNodePool pool(po);
  ASSERT_TRUE(pool.Command({"SET", "x", "1"}).ok());
  EXPECT_EQ(pool.open_connections(), 1);
  // Kill every normal client connection server-side (including the pooled
  // one; the killer's own connection is spared with SKIPME yes).
  auto killed = testing::RedisCommandOnce(server_->port(), {"CLIENT", "KILL", "TYPE", "normal"});
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_GE(killed->integer(), 1);
  // The stale pooled connection fails; the pool retries once on a new one.
  auto r = pool.Command({"GET", "x"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->str(), "1");
}

TEST_F(RedisClientTest, PoolIsThreadSafe) {
  RedisNodePoolOptions po;
  po.connection = Options();
  po.max_connections = 3;
  RedisNodePool pool(po);
  constexpr int kThreads = 8, kIters = 100;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        std::string key = absl::StrCat("t", t, ":", i), val = absl::StrCat("v", t * 1000 + i);
        std::vector<RedisArgv> cmds = {{"SET", key, val}, {"GET", key}};
        auto r = pool.Pipeline(cmds);
        if (!r.ok() || (*r)[1].str() != val) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(pool.open_connections(), 3);
}

TEST_F(RedisClientTest, ServerKilledGivesUnavailable) {
  RedisNodePoolOptions po;
  po.connection = Options();
  RedisNodePool pool(po);
  ASSERT_TRUE(pool.Command({"PING"}).ok());
  server_->Kill();
  auto r = pool.Command({"PING"});
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
}

}  // namespace
}  // namespace ragkv::kvstore::internal
