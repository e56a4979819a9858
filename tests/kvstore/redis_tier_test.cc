// Tests of the Redis tier (kvstore/redis/redis_tier.h) against real redis-server
// processes: a standalone server (or the one CI starts, RAGKV_TEST_REDIS, with
// a unique key prefix per test) and a 3-master Redis Cluster.
#include "kvstore/redis/redis_tier.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvstore/redis/internal/redis_client.h"
#include "kvstore/redis/internal/redis_cluster.h"
#include "kvstore/redis/internal/redis_record.h"
#include "kvstore/ram_tier.h"
#include "kvstore/tiered_store.h"
#include "tests/kvstore/redis_test_server.h"
#include "tests/kvstore/test_util.h"
#include "tests/support/require.h"
#include "tests/support/shared_redis.h"

namespace ragkv::kvstore {
namespace {

using internal::RedisArgv;
using internal::RedisEndpoint;
using internal::RedisNodePool;
using internal::RedisNodePoolOptions;
using internal::Reply;
using testing::ChunkSpec;
using testing::MakeChunk;
using testing::RedisServer;
using testing::TestChunk;

std::string UniquePrefix() {
  static std::atomic<int> n{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat("rt-", ::getpid(), "-", n.fetch_add(1), "-", info ? info->name() : "x");
}

// Expects `blob` to hold exactly `want`.
void ExpectBlob(const absl::StatusOr<Tier::Blob>& blob, const std::string& want) {
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(blob->has_value()) << "unexpected miss";
  EXPECT_EQ((*blob)->size(), want.size());
  EXPECT_TRUE((*blob)->view() == want) << "bytes differ";
}

// RedisTierTest: one standalone server per test (or CI's shared one).
class RedisTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(testing::RedisServerAvailable() || std::getenv("RAGKV_TEST_REDIS") != nullptr)
        << "redis-server not installed and RAGKV_TEST_REDIS not set";
    // CI's shared server, unless it would keep the test keys on disk (then
    // a failure under CI=true, a private server elsewhere).
    absl::StatusOr<std::string> shared = ::ragkv::testing::SharedTestRedis();
    ASSERT_TRUE(shared.ok() || !::ragkv::testing::UnderCi()) << shared.status();
    if (shared.ok() && !shared->empty() && !NeedsOwnServer()) {
      endpoint_ = *shared;
    } else {
      auto s = RedisServer::Start(ServerArgs());
      ASSERT_TRUE(s.ok()) << s.status();
      server_ = *std::move(s);
      endpoint_ = server_->endpoint();
    }
    auto ep = RedisEndpoint::Parse(endpoint_);
    ASSERT_TRUE(ep.ok()) << ep.status();
    RedisNodePoolOptions po;
    po.connection.endpoint = *ep;
    po.connection.command_timeout = absl::Seconds(10);
    raw_ = std::make_unique<RedisNodePool>(po);
    prefix_ = UniquePrefix();
  }
  void TearDown() override {
    // On a shared server (CI's RAGKV_TEST_REDIS), remove this test's keys.
    if (server_ == nullptr && raw_ != nullptr) {
      for (const std::string& k : Keys()) {
        raw_->Command({"UNLINK", k}).status().IgnoreError();  // best-effort cleanup
      }
    }
  }
  virtual bool NeedsOwnServer() const { return false; }
  virtual std::vector<std::string> ServerArgs() const { return {}; }

  RedisTierOptions Options() const {
    RedisTierOptions o;
    o.endpoints = {endpoint_};
    o.key_prefix = prefix_;
    return o;
  }
  std::unique_ptr<RedisTier> MakeTier(const RedisTierOptions& o) {
    auto t = RedisTier::Create(o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  Reply Raw(const RedisArgv& argv) {
    auto r = raw_->Command(argv);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : Reply();
  }
  // Keys: every key under this test's prefix.
  std::set<std::string> Keys() {
    std::set<std::string> keys;
    std::string cursor = "0", pattern = prefix_ + ":*";
    do {
      Reply r = Raw({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (r.size() != 2) break;
      cursor = std::string(r[0].str());
      for (size_t i = 0; i < r[1].size(); ++i) keys.insert(std::string(r[1][i].str()));
    } while (cursor != "0");
    return keys;
  }
  // FlipByte: flips one byte of the value at `key` in place.
  void FlipByte(const std::string& key, size_t offset) {
    Reply v = Raw({"GETRANGE", key, std::to_string(offset), std::to_string(offset)});
    ASSERT_EQ(v.str().size(), 1u) << key;
    std::string flipped(1, static_cast<char>(v.str()[0] ^ 0x5a));
    Raw({"SETRANGE", key, std::to_string(offset), flipped});
  }

  std::unique_ptr<RedisServer> server_;
  std::string endpoint_;
  std::string prefix_;
  std::unique_ptr<RedisNodePool> raw_;
};

TEST_F(RedisTierTest, RoundTripIsByteIdentical) {
  auto tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  EXPECT_FALSE(tier->cluster_mode());
  EXPECT_EQ(tier->Name(), "redis");
  TestChunk c = MakeChunk(ChunkSpec{.tokens = 24, .layers = 4});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  ExpectBlob(tier->GetHeader(c.key), c.encoded->header);
  for (uint32_t l = 0; l < 4; ++l) ExpectBlob(testing::ReadLayer(*tier, c.key, l), c.encoded->layers[l]);
  auto layers = testing::ReadLayers(*tier, c.key, 1, 3);
  ASSERT_TRUE(layers.ok()) << layers.status();
  ASSERT_EQ(layers->size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE((*layers)[i].has_value());
    EXPECT_TRUE((*layers)[i]->view() == c.encoded->layers[1 + i]);
  }
  // The bytes decode (the tier returned a valid chunk).
  auto h = DecodeHeader(c.encoded->header);
  ASSERT_TRUE(h.ok());
  std::vector<float> k(h->LayerElements()), v(h->LayerElements());
  EXPECT_TRUE(DecodeLayerToF32(*h, (*layers)[0]->view(), 1, k.data(), v.data()).ok());
  EXPECT_EQ(k, c.k[1]);
  auto has = tier->Contains(c.key);
  ASSERT_TRUE(has.ok());
  EXPECT_TRUE(*has);
  // Key layout: header + one key per layer + the fingerprint index.
  std::set<std::string> keys = Keys();
  EXPECT_EQ(keys.size(), 1u + 4u + 1u);
  EXPECT_TRUE(keys.count(internal::RedisHeaderKey(prefix_, c.key)));
  TierStats st = tier->Stats();
  EXPECT_EQ(st.hits, 6u);  // every read above: GetHeader, 4 x ReadLayer, ReadLayers
  EXPECT_EQ(st.puts, 1u);
  EXPECT_EQ(st.bytes_written, c.encoded->TotalBytes());
  EXPECT_EQ(st.errors, 0u);
}

TEST_F(RedisTierTest, MissesAreNulloptAndCounted) {
  auto tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  // Same tokens under another model fingerprint: another key, a miss.
  TestChunk other = MakeChunk(ChunkSpec{.fp_seed = 2});
  auto miss = tier->GetHeader(other.key);
  ASSERT_TRUE(miss.ok()) << miss.status();
  EXPECT_FALSE(miss->has_value());
  auto layer = testing::ReadLayer(*tier, other.key, 0);
  ASSERT_TRUE(layer.ok());
  EXPECT_FALSE(layer->has_value());
  auto has = tier->Contains(other.key);
  ASSERT_TRUE(has.ok());
  EXPECT_FALSE(*has);
  // An absent layer index of a present chunk is a miss too.
  auto beyond = testing::ReadLayer(*tier, c.key, 7);
  ASSERT_TRUE(beyond.ok());
  EXPECT_FALSE(beyond->has_value());
  EXPECT_EQ(tier->Stats().misses, 2u);  // the header of `other`, twice
  EXPECT_EQ(tier->Stats().errors, 0u);
}

TEST_F(RedisTierTest, FingerprintMismatchThroughTheStoreIsAMiss) {
  std::shared_ptr<Tier> redis(MakeTier(Options()).release());
  ASSERT_NE(redis, nullptr);
  auto store = TieredStore::Create({}, {redis});
  ASSERT_TRUE(store.ok()) << store.status();
  TestChunk c = MakeChunk(ChunkSpec{});
  ASSERT_TRUE((*store)->Put(c.key, c.encoded).ok());
  auto hit = (*store)->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(hit.ok()) << hit.status();
  ASSERT_TRUE(hit->has_value());
  EXPECT_EQ((*hit)->layers.size(), 3u);
  auto wrong = (*store)->Get(c.key, testing::TestFingerprint(9));
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_FALSE(wrong->has_value());
  EXPECT_EQ((*store)->Stats().fingerprint_mismatches, 1u);
}

TEST_F(RedisTierTest, LargeLayersAreSplitUnderMaxValueBytes) {
  RedisTierOptions o = Options();
  o.max_value_bytes = 4096;
  o.max_pipeline_bytes = 16 << 10;  // several pipelines per Put and per Get
  auto tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  // 2 heads x 64 tokens x 32 dims x f32 x (K+V) = 32 KiB + prefix per layer.
  TestChunk c = MakeChunk(ChunkSpec{.tokens = 64, .layers = 3, .kv_heads = 2, .head_dim = 32});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  std::set<std::string> keys = Keys();
  size_t want_keys = 2;  // header + fingerprint index
  for (const std::string& l : c.encoded->layers) {
    uint32_t parts = internal::PartsFor(l.size(), o.max_value_bytes);
    EXPECT_GT(parts, 8u);
    want_keys += parts;
  }
  EXPECT_EQ(keys.size(), want_keys);
  for (const std::string& k : keys) {
    if (absl::StrContains(k, ":fp:")) continue;
    Reply len = Raw({"STRLEN", k});
    EXPECT_LE(len.integer(), 4096) << k;
  }
  auto layers = testing::ReadLayers(*tier, c.key, 0, 3);
  ASSERT_TRUE(layers.ok()) << layers.status();
  for (uint32_t l = 0; l < 3; ++l) {
    ASSERT_TRUE((*layers)[l].has_value()) << l;
    EXPECT_TRUE((*layers)[l]->view() == c.encoded->layers[l]) << l;
  }
  ExpectBlob(tier->GetHeader(c.key), c.encoded->header);

  // Overwrite with a smaller layout (int8 codec: fewer parts per layer): the
  // surplus parts of the old layout are removed and reads see the new bytes.
  ChunkSpec small{.tokens = 64, .layers = 3, .kv_heads = 2, .head_dim = 32};
  small.codec = Codec::kInt8PerChannel;
  TestChunk c2 = MakeChunk(small);
  ASSERT_EQ(c2.key, c.key);
  ASSERT_TRUE(tier->Put(c2.key, c2.encoded).ok());
  size_t want2 = 2;
  for (const std::string& l : c2.encoded->layers) want2 += internal::PartsFor(l.size(), 4096);
  EXPECT_EQ(Keys().size(), want2);
  for (uint32_t l = 0; l < 3; ++l) ExpectBlob(testing::ReadLayer(*tier, c2.key, l), c2.encoded->layers[l]);
}

TEST_F(RedisTierTest, FlippedByteIsReportedAsMissNeverServed) {
  RedisTierOptions o = Options();
  o.max_value_bytes = 4096;
  auto tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{.tokens = 64, .layers = 2, .kv_heads = 2, .head_dim = 32});
  struct Case {
    std::string key;
    size_t offset;
    bool header;
  };
  const std::vector<Case> cases = {
      {internal::RedisHeaderKey(prefix_, c.key), 100, true},             // header payload
      {internal::RedisHeaderKey(prefix_, c.key), 20, true},              // frame field
      {internal::RedisLayerKey(prefix_, c.key, 1, 0), 3000, false},      // part 0 payload
      {internal::RedisLayerKey(prefix_, c.key, 0, 3), 2000, false},      // middle part
      {internal::RedisLayerKey(prefix_, c.key, 1, 2), 41, false},        // a checksum byte
  };
  uint64_t corrupt = 0;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.key + " @" + std::to_string(cs.offset));
    ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
    FlipByte(cs.key, cs.offset);
    if (cs.header) {
      auto h = tier->GetHeader(c.key);
      ASSERT_TRUE(h.ok()) << h.status();
      EXPECT_FALSE(h->has_value()) << "corrupt header served";
    } else {
      uint32_t layer = cs.key.find(":L1") != std::string::npos ? 1 : 0;
      auto l = testing::ReadLayer(*tier, c.key, layer);
      ASSERT_TRUE(l.ok()) << l.status();
      EXPECT_FALSE(l->has_value()) << "corrupt layer served";
    }
    EXPECT_EQ(tier->Stats().corrupt_records, ++corrupt);
    // Reported corruption deletes the chunk: it stays a miss.
    auto again = tier->GetHeader(c.key);
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(again->has_value());
  }
  EXPECT_EQ(tier->Stats().errors, 0u);
}

// ChunkCollector: a ChunkReader that keeps what it is given and can run a
// hook (to change the server's data mid-read) on the header or a layer.
struct ChunkCollector final : public ChunkReader {
  uint32_t first_layer = 0;
  uint32_t want_layers = 0;  // 0: the header's count (from the blob), less first_layer
  std::optional<std::string> header;
  std::vector<std::optional<std::string>> layers;
  std::function<void()> on_header;
  std::function<void(uint32_t)> on_layer;
  LayerRange OnHeader(PinnedBytes h) override {
    header = std::string(h.view());
    if (on_header) on_header();
    if (want_layers > 0) return LayerRange{first_layer, want_layers};
    auto n = PeekNumLayers(h.view());
    return n.ok() && *n > first_layer ? LayerRange{first_layer, *n - first_layer} : LayerRange{};
  }
  bool OnLayer(uint32_t layer, Tier::Blob b) override {
    EXPECT_EQ(layer, first_layer + layers.size()) << "layers out of order";
    layers.push_back(b.has_value() ? std::optional<std::string>(std::string(b->view()))
                                   : std::nullopt);
    if (on_layer) on_layer(layer);
    return true;
  }
};

ReadMode Mode(bool stream) { return stream ? ReadMode::kStream : ReadMode::kWhole; }

// ExpectWholeChunk: `got` holds exactly the chunk `c`.
void ExpectWholeChunk(const ChunkCollector& got, const TestChunk& c) {
  ASSERT_TRUE(got.header.has_value()) << "header missing";
  EXPECT_TRUE(*got.header == c.encoded->header);
  ASSERT_EQ(got.layers.size(), c.encoded->layers.size());
  for (size_t l = 0; l < got.layers.size(); ++l) {
    ASSERT_TRUE(got.layers[l].has_value()) << "layer " << l << " missing";
    EXPECT_TRUE(*got.layers[l] == c.encoded->layers[l]) << "layer " << l << " differs";
  }
}

TEST_F(RedisTierTest, ReadChunkFetchesHeaderAndLayersInOnePipeline) {
  auto tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{.tokens = 24, .layers = 4});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());  // sets the layout hint
  std::vector<std::string> layer_keys;
  for (uint32_t l = 0; l < 4; ++l) layer_keys.push_back(internal::RedisLayerKey(prefix_, c.key, l, 0));
  auto drop_layers = [&] {
    for (const std::string& k : layer_keys) Raw({"DEL", k});
  };

  // Whole-chunk read: layers already travelled with the header, so deleting
  // them on the server once the header is in changes nothing.
  ChunkCollector whole;
  whole.on_header = drop_layers;
  ASSERT_TRUE(tier->ReadChunk(c.key, whole, ReadMode::kWhole).ok());
  ExpectWholeChunk(whole, c);
  EXPECT_EQ(tier->Stats().hits, 1u);
  EXPECT_EQ(tier->Stats().bytes_read, c.encoded->TotalBytes());

  // A tier without a layout hint (fresh object) reads the header alone first:
  // the layers deleted after it are then missing (a miss, not corruption).
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  auto fresh = MakeTier(Options());
  ASSERT_NE(fresh, nullptr);
  ChunkCollector cold;
  cold.on_header = drop_layers;
  ASSERT_TRUE(fresh->ReadChunk(c.key, cold, ReadMode::kWhole).ok());
  ASSERT_TRUE(cold.header.has_value());
  ASSERT_EQ(cold.layers.size(), 1u);  // stops at the first absent layer
  EXPECT_FALSE(cold.layers[0].has_value());
  EXPECT_EQ(fresh->Stats().corrupt_records, 0u);

  // Streaming: the first pipeline holds the header and layer 0 only.
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  ChunkCollector streamed;
  streamed.on_layer = [&](uint32_t l) {
    if (l == 0) drop_layers();
  };
  ASSERT_TRUE(tier->ReadChunk(c.key, streamed, ReadMode::kStream).ok());
  ASSERT_EQ(streamed.layers.size(), 2u);
  ASSERT_TRUE(streamed.layers[0].has_value());
  EXPECT_TRUE(*streamed.layers[0] == c.encoded->layers[0]);
  EXPECT_FALSE(streamed.layers[1].has_value());

  // Streaming an intact chunk delivers every layer, in order.
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  ChunkCollector all;
  ASSERT_TRUE(tier->ReadChunk(c.key, all, ReadMode::kStream).ok());
  ExpectWholeChunk(all, c);

  // A reader that resumes at layer 2 gets layers 2 and 3 only, in order;
  // one that wants the header alone gets no layer.
  for (ReadMode mode : {ReadMode::kWhole, ReadMode::kStream, ReadMode::kHeaderOnly}) {
    ChunkCollector tail;
    tail.first_layer = 2;
    ASSERT_TRUE(tier->ReadChunk(c.key, tail, mode).ok());
    ASSERT_TRUE(tail.header.has_value());
    ASSERT_EQ(tail.layers.size(), 2u);
    EXPECT_TRUE(*tail.layers[0] == c.encoded->layers[2]);
    EXPECT_TRUE(*tail.layers[1] == c.encoded->layers[3]);
  }
  const uint64_t before = tier->Stats().bytes_read;
  ExpectBlob(tier->GetHeader(c.key), c.encoded->header);
  EXPECT_EQ(tier->Stats().bytes_read, before + c.encoded->header.size());

  // A miss calls nothing and counts a miss.
  TestChunk absent = MakeChunk(ChunkSpec{.token_seed = 77});
  ChunkCollector none;
  const uint64_t misses = tier->Stats().misses;
  ASSERT_TRUE(tier->ReadChunk(absent.key, none, ReadMode::kWhole).ok());
  EXPECT_FALSE(none.header.has_value());
  EXPECT_TRUE(none.layers.empty());
  EXPECT_EQ(tier->Stats().misses, misses + 1);
  EXPECT_EQ(tier->Stats().errors, 0u);
}

TEST_F(RedisTierTest, ReadChunkWithAWrongLayoutHintStillReadsEveryLayout) {
  RedisTierOptions o = Options();
  o.max_value_bytes = 4096;  // split layers: several parts each
  auto tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  TestChunk small = MakeChunk(ChunkSpec{.tokens = 8, .layers = 5, .token_seed = 3});
  TestChunk split = MakeChunk(ChunkSpec{.tokens = 64, .layers = 3, .kv_heads = 2, .head_dim = 32});
  ChunkSpec int8{.tokens = 64, .layers = 7, .kv_heads = 2, .head_dim = 32, .token_seed = 9};
  int8.codec = Codec::kInt8PerChannel;
  TestChunk other = MakeChunk(int8);
  for (const TestChunk* c : {&small, &split, &other}) ASSERT_TRUE(tier->Put(c->key, c->encoded).ok());
  // Every order of reads: the hint is always the previous chunk's layout.
  for (int round = 0; round < 2; ++round) {
    for (const TestChunk* c : {&small, &split, &other, &split, &small, &other}) {
      for (bool stream : {false, true}) {
        ChunkCollector got;
        ASSERT_TRUE(tier->ReadChunk(c->key, got, Mode(stream)).ok());
        ExpectWholeChunk(got, *c);
      }
    }
  }
  // The reader may ask for fewer layers than the chunk has.
  ChunkCollector two;
  two.want_layers = 2;
  ASSERT_TRUE(tier->ReadChunk(other.key, two, ReadMode::kWhole).ok());
  ASSERT_EQ(two.layers.size(), 2u);
  EXPECT_TRUE(*two.layers[1] == other.encoded->layers[1]);
  EXPECT_EQ(tier->Stats().corrupt_records, 0u);
  EXPECT_EQ(tier->Stats().errors, 0u);
}

TEST_F(RedisTierTest, ReadChunkReportsACorruptLayerAndServesNothingOfIt) {
  RedisTierOptions o = Options();
  o.max_value_bytes = 4096;
  auto tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{.tokens = 64, .layers = 3, .kv_heads = 2, .head_dim = 32});
  for (bool stream : {false, true}) {
    ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
    FlipByte(internal::RedisLayerKey(prefix_, c.key, 1, 2), 1000);  // middle part of layer 1
    ChunkCollector got;
    ASSERT_TRUE(tier->ReadChunk(c.key, got, Mode(stream)).ok());
    ASSERT_EQ(got.layers.size(), 2u) << "stream=" << stream;
    EXPECT_TRUE(*got.layers[0] == c.encoded->layers[0]);
    EXPECT_FALSE(got.layers[1].has_value()) << "corrupt layer served";
    // Reported: counted and deleted.
    auto h = tier->GetHeader(c.key);
    ASSERT_TRUE(h.ok());
    EXPECT_FALSE(h->has_value());
  }
  EXPECT_EQ(tier->Stats().corrupt_records, 2u);
}

TEST_F(RedisTierTest, StoreStreamsAndGetsThroughReadChunk) {
  std::shared_ptr<Tier> redis(MakeTier(Options()).release());
  ASSERT_NE(redis, nullptr);
  TieredStoreOptions so;
  so.promote_on_hit = false;
  auto store = TieredStore::Create(so, {redis});
  ASSERT_TRUE(store.ok()) << store.status();
  TestChunk c = MakeChunk(ChunkSpec{.tokens = 32, .layers = 6});
  ASSERT_TRUE((*store)->Put(c.key, c.encoded).ok());
  std::vector<uint32_t> order;
  auto sr = (*store)->StreamLayers(c.key, c.header.fingerprint,
                                   [&](const KvChunkHeader& h, LoadedLayer l) -> absl::Status {
                                     EXPECT_EQ(h.key, c.key);
                                     EXPECT_TRUE(l.blob.view() == c.encoded->layers[l.layer]);
                                     order.push_back(l.layer);
                                     return absl::OkStatus();
                                   });
  ASSERT_TRUE(sr.ok()) << sr.status();
  EXPECT_TRUE(sr->found);
  EXPECT_EQ(sr->layers_delivered, 6u);
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  auto got = (*store)->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  for (uint32_t l = 0; l < 6; ++l) EXPECT_TRUE((*got)->layers[l].blob.view() == c.encoded->layers[l]);
  // A callback error aborts the stream and is returned.
  auto aborted = (*store)->StreamLayers(c.key, c.header.fingerprint,
                                        [](const KvChunkHeader&, LoadedLayer l) -> absl::Status {
                                          if (l.layer == 2) return absl::CancelledError("stop");
                                          return absl::OkStatus();
                                        });
  EXPECT_TRUE(absl::IsCancelled(aborted.status())) << aborted.status();
}

TEST_F(RedisTierTest, ValueCopiedToAnotherKeyFailsItsChecksum) {
  auto tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{.layers = 2});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  // Layer 0's (valid) value stored under layer 1's key.
  Reply l0 = Raw({"GET", internal::RedisLayerKey(prefix_, c.key, 0, 0)});
  Raw({"SET", internal::RedisLayerKey(prefix_, c.key, 1, 0), std::string(l0.str())});
  auto l = testing::ReadLayer(*tier, c.key, 1);
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->has_value());
  EXPECT_EQ(tier->Stats().corrupt_records, 1u);
}

TEST_F(RedisTierTest, PartsOfTwoPutsAreATornMissNotCorruption) {
  RedisTierOptions o = Options();
  o.max_value_bytes = 4096;
  auto tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{.tokens = 64, .layers = 1, .kv_heads = 2, .head_dim = 32});
  const std::string p2 = internal::RedisLayerKey(prefix_, c.key, 0, 2);
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  Reply old = Raw({"GET", p2});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());  // new write id
  Raw({"SET", p2, std::string(old.str())});          // one part from the old Put
  auto l = testing::ReadLayer(*tier, c.key, 0);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_FALSE(l->has_value());
  EXPECT_EQ(tier->Stats().corrupt_records, 0u);
  // A missing part (expired / evicted) is also a plain miss.
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  Raw({"DEL", p2});
  l = testing::ReadLayer(*tier, c.key, 0);
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->has_value());
  EXPECT_EQ(tier->Stats().corrupt_records, 0u);
}

TEST_F(RedisTierTest, DeleteAndDeleteByFingerprintRemoveEveryKey) {
  RedisTierOptions o = Options();
  o.max_value_bytes = 4096;
  auto tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  std::vector<TestChunk> a, b;
  for (uint32_t i = 0; i < 3; ++i) {
    a.push_back(MakeChunk(ChunkSpec{.tokens = 40, .kv_heads = 2, .head_dim = 16, .fp_seed = 1,
                                    .token_seed = 10 + i}));
  }
  for (uint32_t i = 0; i < 2; ++i) {
    b.push_back(MakeChunk(ChunkSpec{.fp_seed = 2, .token_seed = 20 + i}));
  }
  for (auto& c : a) ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  for (auto& c : b) ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());

  ASSERT_TRUE(tier->Delete(b[0].key).ok());
  ASSERT_TRUE(tier->Delete(b[0].key).ok());  // absent: still OK
  auto gone = tier->GetHeader(b[0].key);
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());

  auto n = tier->DeleteByFingerprint(a[0].header.fingerprint);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 3u);
  for (auto& c : a) {
    auto h = tier->GetHeader(c.key);
    ASSERT_TRUE(h.ok());
    EXPECT_FALSE(h->has_value());
  }
  ExpectBlob(tier->GetHeader(b[1].key), b[1].encoded->header);
  // Only b[1]'s keys (header + 3 layers) and fingerprint B's index remain.
  std::set<std::string> keys = Keys();
  EXPECT_EQ(keys.size(), 5u);
  for (const std::string& k : keys) {
    EXPECT_TRUE(absl::StrContains(k, b[1].key.ToHex()) || absl::StrContains(k, ":fp:")) << k;
  }
  auto n0 = tier->DeleteByFingerprint(testing::TestFingerprint(77));
  ASSERT_TRUE(n0.ok());
  EXPECT_EQ(*n0, 0u);
  EXPECT_EQ(tier->Stats().deletes, 4u);
}

TEST_F(RedisTierTest, TtlIsSetOnEveryKey) {
  RedisTierOptions o = Options();
  o.ttl = absl::Seconds(300);
  auto tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  std::set<std::string> keys = Keys();
  ASSERT_EQ(keys.size(), 5u);
  for (const std::string& k : keys) {
    Reply ttl = Raw({"PTTL", k});
    EXPECT_GT(ttl.integer(), 290000) << k;
    EXPECT_LE(ttl.integer(), 300000) << k;
  }
}

TEST_F(RedisTierTest, BadInputIsRejectedAndStoredDataIntact) {
  auto tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  // Header/layer count mismatch, garbage header, null chunk.
  auto bad = std::make_shared<EncodedChunk>(*c.encoded);
  bad->layers.pop_back();
  EXPECT_TRUE(absl::IsInvalidArgument(tier->Put(c.key, bad)));
  auto garbage = std::make_shared<EncodedChunk>(*c.encoded);
  garbage->header = "not a header";
  EXPECT_TRUE(absl::IsInvalidArgument(tier->Put(c.key, garbage)));
  EXPECT_TRUE(absl::IsInvalidArgument(tier->Put(c.key, nullptr)));
  // Above max_chunk_bytes.
  RedisTierOptions o = Options();
  o.max_chunk_bytes = 1024;
  auto small = MakeTier(o);
  ASSERT_NE(small, nullptr);
  TestChunk big = MakeChunk(ChunkSpec{.tokens = 64, .token_seed = 5});
  absl::Status s = small->Put(big.key, big.encoded);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("max_chunk_bytes"), std::string::npos) << s;
  // The stored chunk is untouched by all of the above.
  ExpectBlob(tier->GetHeader(c.key), c.encoded->header);
  for (uint32_t l = 0; l < 3; ++l) ExpectBlob(testing::ReadLayer(*tier, c.key, l), c.encoded->layers[l]);
  EXPECT_FALSE(tier->GetHeader(big.key)->has_value());
  // A range beyond the chunk's layers delivers nothing.
  auto beyond = testing::ReadLayers(*tier, c.key, kMaxLayers, 1);
  ASSERT_TRUE(beyond.ok()) << beyond.status();
  EXPECT_FALSE((*beyond)[0].has_value());
}

TEST_F(RedisTierTest, BadOptionsAreInvalidArgument) {
  std::vector<RedisTierOptions> bad(7, Options());
  bad[0].endpoints.clear();
  bad[1].endpoints = {"no-port"};
  bad[2].max_value_bytes = 100;
  bad[3].max_value_bytes = uint64_t{1} << 30;
  bad[4].key_prefix = "a{b}";
  bad[5].pool_size = 0;
  bad[6].key_prefix = "";
  for (size_t i = 0; i < bad.size(); ++i) {
    auto t = RedisTier::Create(bad[i]);
    EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << i << ": " << t.status();
  }
  RedisTierOptions forced = Options();
  forced.mode = RedisMode::kCluster;
  auto t = RedisTier::Create(forced);
  EXPECT_TRUE(absl::IsFailedPrecondition(t.status())) << t.status();
}

TEST(RedisTierUnreachableTest, CreateFailsWithAClearError) {
  int port = testing::PickFreePort();
  RedisTierOptions o;
  o.endpoints = {absl::StrCat("127.0.0.1:", port)};
  auto t = RedisTier::Create(o);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsUnavailable(t.status())) << t.status();
  EXPECT_NE(t.status().message().find(o.endpoints[0]), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("refused"), std::string::npos) << t.status();
}

TEST_F(RedisTierTest, ConcurrentPutsAndGets) {
  RedisTierOptions o = Options();
  o.pool_size = 2;
  auto tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  constexpr int kThreads = 4, kChunks = 6;
  std::vector<std::vector<TestChunk>> chunks(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kChunks; ++i) {
      chunks[t].push_back(MakeChunk(ChunkSpec{.token_seed = static_cast<uint32_t>(100 * t + i)}));
    }
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (auto& c : chunks[t]) {
        if (!tier->Put(c.key, c.encoded).ok()) failures++;
        auto h = tier->GetHeader(c.key);
        if (!h.ok() || !h->has_value() || (*h)->view() != c.encoded->header) failures++;
        auto ls = testing::ReadLayers(*tier, c.key, 0, 3);
        if (!ls.ok()) {
          failures++;
          continue;
        }
        for (uint32_t l = 0; l < 3; ++l) {
          if (!(*ls)[l].has_value() || (*ls)[l]->view() != c.encoded->layers[l]) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<ChunkKey> keys;
  for (auto& v : chunks)
    for (auto& c : v) keys.push_back(c.key);
  for (size_t i = 0; i < keys.size(); ++i) {
    ExpectBlob(tier->GetHeader(keys[i]), chunks[i / kChunks][i % kChunks].encoded->header);
  }
}

// A server with a 3 MiB memory cap: Redis -OOM is ResourceExhausted and
// nothing already stored is lost.
class RedisTierOomTest : public RedisTierTest {
 protected:
  bool NeedsOwnServer() const override { return true; }
  std::vector<std::string> ServerArgs() const override {
    return {"--maxmemory", "3mb", "--maxmemory-policy", "noeviction"};
  }
};

TEST_F(RedisTierOomTest, OutOfMemoryIsResourceExhaustedAndKeepsStoredChunks) {
  auto tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  TestChunk c = MakeChunk(ChunkSpec{});
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  // ~12 MiB: far above the cap.
  TestChunk big = MakeChunk(ChunkSpec{.tokens = 512, .layers = 6, .kv_heads = 4, .head_dim = 128,
                                      .token_seed = 9});
  absl::Status s = tier->Put(big.key, big.encoded);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_FALSE(tier->GetHeader(big.key)->has_value());
  ExpectBlob(tier->GetHeader(c.key), c.encoded->header);
  for (uint32_t l = 0; l < 3; ++l) ExpectBlob(testing::ReadLayer(*tier, c.key, l), c.encoded->layers[l]);
}

// Killing the server: the tier reports errors (counted), the store degrades
// them to misses and keeps serving what RAM holds.
class RedisTierKillTest : public RedisTierTest {
 protected:
  bool NeedsOwnServer() const override { return true; }
};

TEST_F(RedisTierKillTest, DeadServerDegradesToMissAndStoreServesFromRam) {
  RedisTierOptions o = Options();
  o.connect_timeout = absl::Milliseconds(200);
  auto redis_or = RedisTier::Create(o);
  ASSERT_TRUE(redis_or.ok()) << redis_or.status();
  std::shared_ptr<Tier> redis(redis_or->release());
  auto ram = CreateRamTier(RamTierOptions{.capacity_bytes = 64 << 20});
  ASSERT_TRUE(ram.ok());
  std::shared_ptr<Tier> ram_tier(ram->release());
  auto store = TieredStore::Create({}, {ram_tier, redis});
  ASSERT_TRUE(store.ok()) << store.status();

  TestChunk in_both = MakeChunk(ChunkSpec{.token_seed = 1});
  TestChunk redis_only = MakeChunk(ChunkSpec{.token_seed = 2});
  ASSERT_TRUE((*store)->Put(in_both.key, in_both.encoded).ok());
  ASSERT_TRUE(redis->Put(redis_only.key, redis_only.encoded).ok());
  auto before = (*store)->Get(redis_only.key, redis_only.header.fingerprint);
  ASSERT_TRUE(before.ok() && before->has_value());
  ASSERT_TRUE(ram_tier->Delete(redis_only.key).ok());  // only Redis has it now

  server_->Kill();

  auto h = redis->GetHeader(redis_only.key);
  EXPECT_TRUE(absl::IsUnavailable(h.status())) << h.status();
  auto put = redis->Put(redis_only.key, redis_only.encoded);
  EXPECT_TRUE(absl::IsUnavailable(put)) << put;
  EXPECT_GE(redis->Stats().errors, 2u);

  auto from_ram = (*store)->Get(in_both.key, in_both.header.fingerprint);
  ASSERT_TRUE(from_ram.ok()) << from_ram.status();
  ASSERT_TRUE(from_ram->has_value());
  EXPECT_EQ((*from_ram)->tier_index, 0u);
  auto lost = (*store)->Get(redis_only.key, redis_only.header.fingerprint);
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_FALSE(lost->has_value());
  EXPECT_GE((*store)->Stats().tier_errors, 1u);
  // Calls while the node is down fail fast (reconnect backoff), not after a
  // timeout each.
  absl::Time t0 = absl::Now();
  for (int i = 0; i < 20; ++i) {
    redis->Contains(in_both.key).status().IgnoreError();  // only the latency matters
  }
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
}

// ------------------------------------------------------------ cluster mode --

class RedisTierClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(testing::RedisServerAvailable()) << "redis-server not installed";
    auto c = testing::RedisTestCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
  }
  std::unique_ptr<testing::RedisTestCluster> cluster_;
};

TEST_F(RedisTierClusterTest, ClusterRoundTripSplitAndNodeKill) {
  RedisTierOptions o;
  o.endpoints = {cluster_->node(2).endpoint()};  // one seed is enough
  o.key_prefix = UniquePrefix();
  o.max_value_bytes = 4096;
  o.connect_timeout = absl::Milliseconds(200);
  auto tier_or = RedisTier::Create(o);
  ASSERT_TRUE(tier_or.ok()) << tier_or.status();
  std::shared_ptr<RedisTier> tier(tier_or->release());
  EXPECT_TRUE(tier->cluster_mode());
  auto ram = CreateRamTier(RamTierOptions{.capacity_bytes = 64 << 20});
  ASSERT_TRUE(ram.ok());
  std::shared_ptr<Tier> ram_tier(ram->release());
  auto store = TieredStore::Create({}, {ram_tier, tier});
  ASSERT_TRUE(store.ok());

  std::vector<TestChunk> chunks;
  std::vector<ChunkKey> keys;
  for (uint32_t i = 0; i < 12; ++i) {
    chunks.push_back(MakeChunk(
        ChunkSpec{.tokens = 32, .layers = 2, .kv_heads = 2, .head_dim = 32, .token_seed = 50 + i}));
    keys.push_back(chunks.back().key);
    ASSERT_TRUE((*store)->Put(chunks.back().key, chunks.back().encoded).ok());
  }
  // Every chunk's keys live on the node owning its hash tag; chunks spread.
  std::set<int> nodes_used;
  for (auto& c : chunks) {
    const std::string hkey = internal::RedisHeaderKey(o.key_prefix, c.key);
    int slot = internal::KeySlot(hkey);
    EXPECT_EQ(slot, internal::KeySlot(internal::RedisLayerKey(o.key_prefix, c.key, 1, 3)));
    int node = slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2;
    nodes_used.insert(node);
    auto exists = testing::RedisCommandOnce(cluster_->node(node).port(), {"EXISTS", hkey});
    ASSERT_TRUE(exists.ok());
    EXPECT_EQ(exists->integer(), 1);
  }
  EXPECT_EQ(nodes_used.size(), 3u);
  for (size_t i = 0; i < keys.size(); ++i) ExpectBlob(tier->GetHeader(keys[i]), chunks[i].encoded->header);
  for (auto& c : chunks) {
    for (bool stream : {false, true}) {
      ChunkCollector got;
      ASSERT_TRUE(tier->ReadChunk(c.key, got, Mode(stream)).ok());
      ExpectWholeChunk(got, c);
    }
    auto ls = testing::ReadLayers(*tier, c.key, 0, 2);
    ASSERT_TRUE(ls.ok()) << ls.status();
    for (uint32_t l = 0; l < 2; ++l) {
      ASSERT_TRUE((*ls)[l].has_value());
      EXPECT_TRUE((*ls)[l]->view() == c.encoded->layers[l]);
    }
  }

  // Kill node 1 mid-test.
  cluster_->node(1).Kill();
  int dead_errors = 0, live_hits = 0;
  for (auto& c : chunks) {
    int slot = internal::KeySlot(internal::RedisHeaderKey(o.key_prefix, c.key));
    auto h = tier->GetHeader(c.key);
    if (slot > 5460 && slot <= 10922) {
      EXPECT_FALSE(h.ok());
      dead_errors += !h.ok();
    } else {
      ASSERT_TRUE(h.ok()) << h.status();
      live_hits += h->has_value();
    }
    // The store (RAM in front) keeps serving every chunk.
    auto got = (*store)->Get(c.key, c.header.fingerprint);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->has_value());
  }
  EXPECT_GT(dead_errors, 0);
  EXPECT_EQ(dead_errors + live_hits, 12);
  EXPECT_GE(tier->Stats().errors, static_cast<uint64_t>(dead_errors));
}

}  // namespace
}  // namespace ragkv::kvstore
