#include "kvstore/tiered_store.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "kvstore/ram_tier.h"
#include "kvstore/ssd/ssd_tier.h"
#include "tests/kvstore/test_util.h"

namespace ragkv::kvstore {
namespace {

using testing::ChunkSpec;
using testing::MakeChunk;
using testing::TempDir;
using testing::TestChunk;

TestChunk Chunk(uint32_t seed, uint8_t fp = 1, Codec codec = Codec::kRaw) {
  ChunkSpec s;
  s.tokens = 32;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.layers = 4;
  s.token_seed = seed;
  s.fp_seed = fp;
  s.codec = codec;
  return MakeChunk(s);
}

std::shared_ptr<Tier> Ram(uint64_t capacity = 64 << 20, const std::string& name = "ram") {
  RamTierOptions o;
  o.capacity_bytes = capacity;
  o.num_shards = 2;
  o.name = name;
  return std::shared_ptr<Tier>(std::move(*CreateRamTier(o)));
}

std::shared_ptr<Tier> Ssd(const std::string& path) {
  SsdTierOptions o;
  o.path = path;
  o.capacity_bytes = 256 << 20;
  o.sync_writes = false;
  auto t = CreateSsdTier(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::shared_ptr<Tier>(std::move(*t));
}

std::unique_ptr<TieredStore> Store(std::vector<std::shared_ptr<Tier>> tiers,
                                   TieredStoreOptions o = {}) {
  auto s = TieredStore::Create(o, std::move(tiers));
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// WrapperTier: forwards to `base`, optionally failing (tier down) or flipping
// a byte in a returned layer (bad medium). Used to test the store's contract
// with tiers it does not control (e.g. the Redis tier).
class WrapperTier : public Tier {
 public:
  WrapperTier(std::shared_ptr<Tier> base, std::string name) : base_(std::move(base)), name_(std::move(name)) {}
  std::atomic<bool> down{false};
  std::atomic<int> corrupt_layer{-1};  // flip a byte in this layer on reads
  std::atomic<bool> corrupt_header{false};

  std::string_view Name() const override { return name_; }
  absl::Status ReadChunk(const ChunkKey& key, ChunkReader& reader, ReadMode mode) override {
    if (down) return absl::UnavailableError("tier down");
    Filter f(this, reader);
    absl::Status s = base_->ReadChunk(key, f, mode);
    if (f.found) {
      counters().hits++;
    } else {
      counters().misses++;
    }
    return s;
  }
  absl::StatusOr<bool> Contains(const ChunkKey& key) override {
    if (down) return absl::UnavailableError("tier down");
    return base_->Contains(key);
  }
  absl::Status Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) override {
    if (down) return absl::UnavailableError("tier down");
    return base_->Put(key, std::move(chunk));
  }
  absl::Status Delete(const ChunkKey& key) override {
    if (down) return absl::UnavailableError("tier down");
    return base_->Delete(key);
  }
  absl::StatusOr<uint64_t> DeleteByFingerprint(const Fingerprint& fp) override {
    if (down) return absl::UnavailableError("tier down");
    return base_->DeleteByFingerprint(fp);
  }

 private:
  // Filter: passes what the base tier delivers on, flipping as configured.
  struct Filter final : ChunkReader {
    Filter(WrapperTier* t, ChunkReader& out) : tier(t), out(out) {}
    LayerRange OnHeader(PinnedBytes h) override {
      found = true;
      return out.OnHeader(tier->corrupt_header ? std::move(*Flip(std::move(h))) : std::move(h));
    }
    bool OnLayer(uint32_t layer, Blob b) override {
      if (b.has_value() && static_cast<int>(layer) == tier->corrupt_layer) b = Flip(std::move(*b));
      return out.OnLayer(layer, std::move(b));
    }
    WrapperTier* const tier;
    ChunkReader& out;
    bool found = false;
  };
  static Blob Flip(PinnedBytes b) {
    std::string copy(b.view());
    copy[copy.size() / 2] ^= 0x04;
    return PinnedBytes::FromString(std::move(copy));
  }
  std::shared_ptr<Tier> base_;
  std::string name_;
};

void ExpectSameKv(const ChunkHandle& h, const TestChunk& c) {
  ASSERT_EQ(h.layers.size(), c.header.num_layers);
  std::vector<float> k(c.header.LayerElements()), v(c.header.LayerElements());
  for (uint32_t l = 0; l < c.header.num_layers; ++l) {
    ASSERT_EQ(h.layers[l].layer, l);
    ASSERT_TRUE(h.layers[l].DecodeToF32(h.header, k.data(), v.data()).ok());
    ASSERT_EQ(k, c.k[l]);  // f32 raw: bit-exact
    ASSERT_EQ(v, c.v[l]);
  }
}

TEST(TieredStore, CascadesAndPromotes) {
  TempDir dir;
  auto ram = Ram();
  auto ssd = Ssd(dir.path());
  auto store = Store({ram, ssd});
  TestChunk c = Chunk(1);
  ASSERT_TRUE(store->Put(c.key, c.encoded).ok());
  EXPECT_TRUE(*ram->Contains(c.key));
  EXPECT_TRUE(*ssd->Contains(c.key));
  ASSERT_TRUE(ram->Delete(c.key).ok());
  EXPECT_EQ(store->Locate(c.key), std::optional<size_t>(1));

  auto got = store->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->tier_index, 1u);
  ExpectSameKv(**got, c);
  EXPECT_TRUE(*ram->Contains(c.key)) << "hit in SSD was not promoted to RAM";
  auto again = store->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->tier_index, 0u);
  StoreStats st = store->Stats();
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.promotions, 1u);
  EXPECT_EQ(st.hits_by_tier, (std::vector<uint64_t>{1, 1}));
  EXPECT_FALSE(store->Get(Chunk(2).key, c.header.fingerprint)->has_value());
  EXPECT_EQ(store->Stats().misses, 1u);
}

TEST(TieredStore, FingerprintMismatchIsAMiss) {
  auto store = Store({Ram()});
  TestChunk c = Chunk(1);
  ASSERT_TRUE(store->Put(c.key, c.encoded).ok());
  auto got = store->Get(c.key, testing::TestFingerprint(9));
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(store->Stats().fingerprint_mismatches, 1u);
  auto sr = store->StreamLayers(c.key, testing::TestFingerprint(9),
                                [](const KvChunkHeader&, LoadedLayer) { return absl::OkStatus(); });
  ASSERT_TRUE(sr.ok());
  EXPECT_FALSE(sr->found);
  // The chunk itself is fine and still served under its own fingerprint.
  EXPECT_TRUE(store->Get(c.key, c.header.fingerprint)->has_value());
}

TEST(TieredStore, CorruptRecordIsReportedAndServedFromTheNextTier) {
  auto base = Ram(64 << 20, "ram-base");
  auto bad = std::make_shared<WrapperTier>(base, "flaky");
  auto good = Ram(64 << 20, "ram2");
  auto store = Store({bad, good});
  TestChunk c = Chunk(1);
  ASSERT_TRUE(store->Put(c.key, c.encoded).ok());
  bad->corrupt_layer = 2;
  auto got = store->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->tier_index, 1u);
  ExpectSameKv(**got, c);
  EXPECT_EQ(bad->Stats().corrupt_records, 1u);
  EXPECT_EQ(store->Stats().corrupt_records, 1u);
  // The corrupt copy was deleted; the good copy was promoted back.
  EXPECT_TRUE(*base->Contains(c.key));
  // Header corruption: same treatment.
  bad->corrupt_layer = -1;
  bad->corrupt_header = true;
  got = store->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->tier_index, 1u);
  EXPECT_EQ(bad->Stats().corrupt_records, 2u);
  // Corrupt everywhere: a miss, never served.
  auto store1 = Store({bad});
  bad->corrupt_header = false;
  bad->corrupt_layer = 0;
  ASSERT_TRUE(store1->Put(c.key, c.encoded).ok());
  EXPECT_FALSE(store1->Get(c.key, c.header.fingerprint)->has_value());
}

TEST(TieredStore, TierErrorDegradesToAMiss) {
  TempDir dir;
  auto ram = Ram();
  auto mid = std::make_shared<WrapperTier>(Ram(64 << 20, "mid-base"), "remote");
  auto ssd = Ssd(dir.path());
  auto store = Store({ram, mid, ssd});
  TestChunk c = Chunk(1);
  ASSERT_TRUE(store->Put(c.key, c.encoded).ok());
  ASSERT_TRUE(ram->Delete(c.key).ok());
  mid->down = true;
  auto got = store->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->tier_index, 2u);
  EXPECT_GE(store->Stats().tier_errors, 1u);
  EXPECT_GE(mid->Stats().errors, 1u);
  // Write-through with a tier down: the error names the tier; the others
  // hold a valid copy.
  TestChunk d = Chunk(2);
  absl::Status s = store->Put(d.key, d.encoded);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("remote"), std::string_view::npos) << s;
  EXPECT_TRUE(store->Get(d.key, d.header.fingerprint)->has_value());
  EXPECT_TRUE(store->Contains(d.key));
  EXPECT_EQ(store->Delete(d.key).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(*ssd->Contains(d.key)) << "delete must still reach the healthy tiers";
}

// best_effort_tiers = 1: the last tier (the remote one, as `serve --redis`
// configures it) failing a Put is counted, not returned, once a tier above
// accepted the chunk; a failure of a tier above it is still an error, and a
// store where no tier accepted still fails.
TEST(TieredStore, BestEffortLastTierIsCountedNotReturned) {
  TempDir dir;
  auto ram = std::make_shared<WrapperTier>(Ram(), "ram");
  auto ssd = std::make_shared<WrapperTier>(Ssd(dir.path()), "ssd");
  auto remote = std::make_shared<WrapperTier>(Ram(64 << 20, "remote-base"), "remote");
  TieredStoreOptions o;
  o.best_effort_tiers = 1;
  auto store = Store({ram, ssd, remote}, o);

  remote->down = true;
  TestChunk a = Chunk(1);
  const uint64_t errors_before = store->Stats().tier_errors;
  ASSERT_TRUE(store->Put(a.key, a.encoded).ok()) << "remote outage must not fail the Put";
  EXPECT_EQ(store->Stats().tier_errors, errors_before + 1);
  EXPECT_TRUE(*ssd->Contains(a.key));
  auto got = store->Get(a.key, a.header.fingerprint);
  ASSERT_TRUE(got.ok() && got->has_value());
  ExpectSameKv(**got, a);

  // The SSD tier is not best-effort: its failure is returned and named.
  remote->down = false;
  ssd->down = true;
  TestChunk b = Chunk(2);
  absl::Status s = store->Put(b.key, b.encoded);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("ssd"), std::string_view::npos) << s;

  // Nothing above the remote tier accepted: the remote failure is an error.
  ssd->down = false;
  ram->down = true;
  ssd->down = true;
  remote->down = true;
  TestChunk c = Chunk(3);
  EXPECT_FALSE(store->Put(c.key, c.encoded).ok());

  // Back up: a new Put reaches every tier again.
  ram->down = ssd->down = remote->down = false;
  TestChunk d = Chunk(4);
  ASSERT_TRUE(store->Put(d.key, d.encoded).ok());
  EXPECT_TRUE(*remote->Contains(d.key));
}

TEST(TieredStore, StreamsLayersInOrderAndFallsBackMidStream) {
  auto base = Ram(64 << 20, "ram-base");
  auto flaky = std::make_shared<WrapperTier>(base, "flaky");
  auto backup = Ram(64 << 20, "backup");
  auto store = Store({flaky, backup});
  TestChunk c = Chunk(3, 1, Codec::kInt8PerChannel);
  ASSERT_TRUE(store->Put(c.key, c.encoded).ok());

  std::vector<uint32_t> order;
  std::vector<float> k(c.header.LayerElements()), v(c.header.LayerElements());
  auto cb = [&](const KvChunkHeader& h, LoadedLayer layer) {
    order.push_back(layer.layer);
    return layer.DecodeToF32(h, k.data(), v.data());
  };
  auto sr = store->StreamLayers(c.key, c.header.fingerprint, cb);
  ASSERT_TRUE(sr.ok()) << sr.status();
  EXPECT_TRUE(sr->found);
  EXPECT_EQ(sr->layers_delivered, 4u);
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3}));

  // Layer 2 corrupt in tier 0: layers 0-1 from tier 0, 2-3 from the backup.
  order.clear();
  flaky->corrupt_layer = 2;
  sr = store->StreamLayers(c.key, c.header.fingerprint, cb);
  ASSERT_TRUE(sr.ok()) << sr.status();
  EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(flaky->Stats().corrupt_records, 1u);

  // No other copy: DataLoss after the delivered layers.
  auto alone_base = Ram(64 << 20, "alone-base");
  auto alone = std::make_shared<WrapperTier>(alone_base, "alone");
  auto store2 = Store({alone});
  ASSERT_TRUE(store2->Put(c.key, c.encoded).ok());
  alone->corrupt_layer = 1;
  order.clear();
  sr = store2->StreamLayers(c.key, c.header.fingerprint, cb);
  EXPECT_EQ(sr.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(order, (std::vector<uint32_t>{0}));

  // A callback error aborts the stream and is returned.
  alone->corrupt_layer = -1;
  ASSERT_TRUE(store2->Put(c.key, c.encoded).ok());
  int calls = 0;
  sr = store2->StreamLayers(c.key, c.header.fingerprint, [&](const KvChunkHeader&, LoadedLayer) {
    return ++calls == 2 ? absl::CancelledError("consumer gone") : absl::OkStatus();
  });
  EXPECT_EQ(sr.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

TEST(TieredStore, StreamFromLowerTierPromotes) {
  TempDir dir;
  auto ram = Ram();
  auto ssd = Ssd(dir.path());
  auto store = Store({ram, ssd});
  TestChunk c = Chunk(4);
  ASSERT_TRUE(ssd->Put(c.key, c.encoded).ok());
  std::vector<LoadedLayer> kept;  // consumers may keep layers pinned
  auto sr = store->StreamLayers(c.key, c.header.fingerprint, [&](const KvChunkHeader&, LoadedLayer l) {
    kept.push_back(std::move(l));
    return absl::OkStatus();
  });
  ASSERT_TRUE(sr.ok() && sr->found);
  EXPECT_EQ(sr->tier_index, 1u);
  EXPECT_TRUE(*ram->Contains(c.key));
  for (uint32_t l = 0; l < 4; ++l) EXPECT_EQ(kept[l].blob.view(), c.encoded->layers[l]);
}

TEST(TieredStore, MultiGetAcrossTiers) {
  TempDir dir;
  auto ram = Ram();
  auto ssd = Ssd(dir.path());
  auto store = Store({ram, ssd});
  std::vector<TestChunk> c;
  for (uint32_t i = 0; i < 5; ++i) c.push_back(Chunk(10 + i));
  ASSERT_TRUE(ram->Put(c[0].key, c[0].encoded).ok());
  ASSERT_TRUE(ssd->Put(c[1].key, c[1].encoded).ok());
  ASSERT_TRUE(store->Put(c[2].key, c[2].encoded).ok());
  std::vector<ChunkKey> keys = {c[0].key, c[1].key, c[2].key, c[3].key, c[0].key};
  auto got = store->MultiGet(keys, c[0].header.fingerprint);
  ASSERT_EQ(got.size(), 5u);
  ASSERT_TRUE(got[0].has_value());
  ASSERT_TRUE(got[1].has_value());
  ASSERT_TRUE(got[2].has_value());
  EXPECT_FALSE(got[3].has_value());
  ASSERT_TRUE(got[4].has_value());
  EXPECT_EQ(got[1]->tier_index, 1u);
  ExpectSameKv(*got[1], c[1]);
  ExpectSameKv(*got[4], c[0]);
  StoreStats st = store->Stats();
  EXPECT_EQ(st.lookups, 5u);
  EXPECT_EQ(st.hits, 4u);
  EXPECT_EQ(st.misses, 1u);
}

TEST(TieredStore, PutRejectsBadInputAndKeepsStoredData) {
  auto ram = Ram();
  auto store = Store({ram});
  TestChunk c = Chunk(1);
  ASSERT_TRUE(store->Put(c.key, c.encoded).ok());
  // Wrong key.
  TestChunk other = Chunk(2);
  EXPECT_EQ(store->Put(c.key, other.encoded).code(), absl::StatusCode::kInvalidArgument);
  // Corrupt layer.
  auto broken = std::make_shared<EncodedChunk>(*c.encoded);
  broken->layers[1][100] ^= 1;
  EXPECT_EQ(store->Put(c.key, broken).code(), absl::StatusCode::kDataLoss);
  // Truncated record, missing layer, garbage header, unknown version.
  auto truncated = std::make_shared<EncodedChunk>(*c.encoded);
  truncated->layers[0].resize(10);
  EXPECT_EQ(store->Put(c.key, truncated).code(), absl::StatusCode::kDataLoss);
  auto missing = std::make_shared<EncodedChunk>(*c.encoded);
  missing->layers.pop_back();
  EXPECT_EQ(store->Put(c.key, missing).code(), absl::StatusCode::kInvalidArgument);
  auto garbage = std::make_shared<EncodedChunk>(*c.encoded);
  garbage->header = "garbage";
  EXPECT_EQ(store->Put(c.key, garbage).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store->Put(c.key, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // Oversized for the RAM tier: ResourceExhausted, the old chunk is intact.
  auto small_ram = Ram(80 << 10, "tiny");  // 40 KiB per shard
  auto store2 = Store({small_ram});
  ASSERT_TRUE(store2->Put(c.key, c.encoded).ok());
  ChunkSpec big;
  big.tokens = 512;
  big.token_seed = 5;
  TestChunk b = MakeChunk(big);
  EXPECT_EQ(store2->Put(b.key, b.encoded).code(), absl::StatusCode::kResourceExhausted);
  auto got = store2->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok() && got->has_value());
  ExpectSameKv(**got, c);
  got = store->Get(c.key, c.header.fingerprint);
  ASSERT_TRUE(got.ok() && got->has_value());
  ExpectSameKv(**got, c);
}

TEST(TieredStore, WriteBackQueueDrainsAndDeletesCancelPending) {
  TempDir dir;
  auto ram = Ram();
  auto ssd = Ssd(dir.path());
  TieredStoreOptions o;
  o.write_policy = WritePolicy::kWriteBack;
  o.write_back_max_chunks = 2;  // forces backpressure
  auto store = Store({ram, ssd}, o);
  std::vector<TestChunk> c;
  for (uint32_t i = 0; i < 10; ++i) c.push_back(Chunk(i));
  for (auto& x : c) ASSERT_TRUE(store->Put(x.key, x.encoded).ok());
  for (auto& x : c) EXPECT_TRUE(*ram->Contains(x.key));  // tier 0 synchronous
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->Stats().write_back_queued, 0u);
  for (auto& x : c) EXPECT_TRUE(*ssd->Contains(x.key));
  // Delete right after Put never leaves the chunk behind in a lower tier.
  for (int r = 0; r < 5; ++r) {
    TestChunk d = Chunk(100 + r);
    ASSERT_TRUE(store->Put(d.key, d.encoded).ok());
    ASSERT_TRUE(store->Delete(d.key).ok());
    ASSERT_TRUE(store->Flush().ok());
    EXPECT_FALSE(store->Contains(d.key)) << r;
  }
  auto n = store->DeleteByFingerprint(c[0].header.fingerprint);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 20u);  // 10 chunks x 2 tiers
  EXPECT_FALSE(store->Contains(c[3].key));
}

TEST(TieredStore, ConcurrentReadersAndWriters) {
  TempDir dir;
  for (WritePolicy policy : {WritePolicy::kWriteThrough, WritePolicy::kWriteBack}) {
    auto ram = Ram(Chunk(0).encoded->TotalBytes() * 6, "small-ram");
    auto ssd = Ssd(dir.Sub(policy == WritePolicy::kWriteBack ? "wb" : "wt"));
    TieredStoreOptions o;
    o.write_policy = policy;
    o.write_back_max_chunks = 4;
    auto store = Store({ram, ssd}, o);
    std::vector<TestChunk> chunks;
    for (uint32_t i = 0; i < 16; ++i) chunks.push_back(Chunk(i));
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(store->Put(chunks[i].key, chunks[i].encoded).ok());
    ASSERT_TRUE(store->Flush().ok());
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    threads.emplace_back([&] {
      for (int r = 0; r < 30; ++r) {
        const TestChunk& c = chunks[8 + r % 8];
        if (!store->Put(c.key, c.encoded).ok()) bad++;
      }
    });
    for (int rd = 0; rd < 3; ++rd) {
      threads.emplace_back([&, rd] {
        std::vector<float> k(chunks[0].header.LayerElements()), v(k.size());
        for (int r = 0; r < 40; ++r) {
          const TestChunk& c = chunks[(r * 3 + rd) % 8];
          if (r % 2 == 0) {
            auto got = store->Get(c.key, c.header.fingerprint);
            if (!got.ok() || !got->has_value()) {
              bad++;
              continue;
            }
            if (!(*got)->layers[1].DecodeToF32((*got)->header, k.data(), v.data()).ok() ||
                k != c.k[1]) {
              bad++;
            }
          } else {
            auto sr = store->StreamLayers(c.key, c.header.fingerprint,
                                          [&](const KvChunkHeader& h, LoadedLayer l) {
                                            RETURN_IF_ERROR(l.DecodeToF32(h, k.data(), v.data()));
                                            if (v != c.v[l.layer]) bad++;
                                            return absl::OkStatus();
                                          });
            if (!sr.ok() || !sr->found) bad++;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(bad.load(), 0);
    ASSERT_TRUE(store->Flush().ok());
  }
}

TEST(TieredStore, CreateRejectsBadArguments) {
  EXPECT_FALSE(TieredStore::Create({}, {}).ok());
  EXPECT_FALSE(TieredStore::Create({}, {nullptr}).ok());
}

}  // namespace
}  // namespace ragkv::kvstore
