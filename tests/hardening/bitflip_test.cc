// Bit flips in stored records: every flipped record is detected (XXH3-64
// checksums over header and layer records, docs/kv_format.md), reported
// (TierStats/StoreStats corrupt_records) and treated as a miss -- never
// served. Many random flips (1-3 bits anywhere in a header or layer record,
// every codec/compression) through a real TieredStore over a RAM tier.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "kvstore/ram_tier.h"
#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"
#include "tests/kvstore/test_util.h"

namespace ragkv::kvstore {
namespace {

using testing::ChunkSpec;
using testing::MakeChunk;
using testing::TestChunk;

// Where to flip: record -1 = header, else layer index; bit positions.
struct FlipPlan {
  int record = -1;
  std::vector<uint64_t> bits;
};

// BitRotTier: forwards to `base`; returns the planned records with bits
// flipped (a bad medium under the store's checksums).
class BitRotTier : public Tier {
 public:
  explicit BitRotTier(std::shared_ptr<Tier> base) : base_(std::move(base)) {}

  void Plan(const ChunkKey& key, FlipPlan plan) {
    absl::MutexLock l(&mu_);
    plans_[key.ToHex()] = std::move(plan);
  }

  std::string_view Name() const override { return "bitrot"; }
  absl::Status ReadChunk(const ChunkKey& key, ChunkReader& reader, ReadMode mode) override {
    Filter f(this, key, reader);
    absl::Status s = base_->ReadChunk(key, f, mode);
    if (f.found) {
      counters().hits++;
    } else {
      counters().misses++;
    }
    return s;
  }
  absl::StatusOr<bool> Contains(const ChunkKey& key) override { return base_->Contains(key); }
  absl::Status Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> c) override {
    return base_->Put(key, std::move(c));
  }
  absl::Status Delete(const ChunkKey& key) override { return base_->Delete(key); }
  absl::StatusOr<uint64_t> DeleteByFingerprint(const Fingerprint& fp) override {
    return base_->DeleteByFingerprint(fp);
  }

 private:
  // Filter: passes the base tier's records on, through Maybe.
  struct Filter final : ChunkReader {
    Filter(BitRotTier* t, const ChunkKey& k, ChunkReader& o) : tier(t), key(k), out(o) {}
    LayerRange OnHeader(PinnedBytes h) override {
      found = true;
      return out.OnHeader(std::move(*tier->Maybe(key, -1, std::move(h))));
    }
    bool OnLayer(uint32_t layer, Blob b) override {
      if (b.has_value()) b = tier->Maybe(key, static_cast<int>(layer), std::move(*b));
      return out.OnLayer(layer, std::move(b));
    }
    BitRotTier* const tier;
    const ChunkKey& key;
    ChunkReader& out;
    bool found = false;
  };

  Blob Maybe(const ChunkKey& key, int record, PinnedBytes b) {
    FlipPlan plan;
    {
      absl::MutexLock l(&mu_);
      auto it = plans_.find(key.ToHex());
      if (it == plans_.end() || it->second.record != record) return b;
      plan = it->second;
    }
    std::string copy(b.view());
    for (uint64_t bit : plan.bits) {
      copy[(bit / 8) % copy.size()] ^= static_cast<char>(1u << (bit % 8));
    }
    return PinnedBytes::FromString(std::move(copy));
  }

  std::shared_ptr<Tier> base_;
  absl::Mutex mu_;
  std::map<std::string, FlipPlan> plans_ ABSL_GUARDED_BY(mu_);
};

TEST(BitFlips, EveryFlippedRecordIsDetectedReportedAndAMiss) {
  constexpr int kChunks = 5000;  // x 1-3 random bits each
  RamTierOptions ro;
  ro.capacity_bytes = 256 << 20;
  auto ram = CreateRamTier(ro);
  ASSERT_TRUE(ram.ok()) << ram.status();
  auto rot = std::make_shared<BitRotTier>(std::shared_ptr<Tier>(std::move(*ram)));
  auto store = TieredStore::Create({}, {rot});
  ASSERT_TRUE(store.ok()) << store.status();

  std::mt19937_64 rng(20261129);
  int header_flips = 0, layer_flips = 0;
  for (int i = 0; i < kChunks; ++i) {
    ChunkSpec spec;
    spec.tokens = 4 + static_cast<uint32_t>(rng() % 24);
    spec.layers = 1 + static_cast<uint32_t>(rng() % 4);
    spec.codec = (i % 2) ? Codec::kInt8PerChannel : Codec::kRaw;
    spec.compression = (i % 3 == 0) ? Compression::kZstd : Compression::kNone;
    spec.dtype = (i % 5 == 0) ? kernels::DType::kF16 : kernels::DType::kF32;
    spec.token_seed = static_cast<uint32_t>(i + 1);
    TestChunk c = MakeChunk(spec);
    ASSERT_TRUE(rot->Put(c.key, c.encoded).ok());

    FlipPlan plan;
    plan.record = static_cast<int>(rng() % (spec.layers + 1)) - 1;
    const std::string& rec =
        plan.record < 0 ? c.encoded->header : c.encoded->layers[static_cast<size_t>(plan.record)];
    const int nbits = 1 + static_cast<int>(rng() % 3);
    std::vector<uint64_t> used;
    for (int b = 0; b < nbits; ++b) {
      uint64_t bit;
      do {
        bit = rng() % (rec.size() * 8);
      } while (std::find(used.begin(), used.end(), bit) != used.end());
      used.push_back(bit);
    }
    plan.bits = used;
    (plan.record < 0 ? header_flips : layer_flips)++;
    rot->Plan(c.key, plan);

    const uint64_t before = (*store)->Stats().corrupt_records;
    auto got = (*store)->Get(c.key, c.header.fingerprint);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(got->has_value()) << "chunk " << i << ": flipped record served (record "
                                   << plan.record << ", " << nbits << " bits)";
    EXPECT_EQ((*store)->Stats().corrupt_records, before + 1) << "chunk " << i << " not reported";
  }
  EXPECT_EQ(rot->Stats().corrupt_records, static_cast<uint64_t>(kChunks));
  EXPECT_GT(header_flips, 500);
  EXPECT_GT(layer_flips, 2000);
}

// Control: the same path with no flips serves every chunk bit-exact, so the
// misses above are due to detection, not to the wrapper.
TEST(BitFlips, UnflippedRecordsAreServed) {
  auto ram = CreateRamTier({});
  ASSERT_TRUE(ram.ok());
  auto rot = std::make_shared<BitRotTier>(std::shared_ptr<Tier>(std::move(*ram)));
  auto store = TieredStore::Create({}, {rot});
  ASSERT_TRUE(store.ok());
  for (uint32_t i = 1; i <= 20; ++i) {
    ChunkSpec spec;
    spec.token_seed = i;
    TestChunk c = MakeChunk(spec);
    ASSERT_TRUE(rot->Put(c.key, c.encoded).ok());
    auto got = (*store)->Get(c.key, c.header.fingerprint);
    ASSERT_TRUE(got.ok() && got->has_value());
    ASSERT_EQ((*got)->layers.size(), spec.layers);
    for (uint32_t l = 0; l < spec.layers; ++l) {
      EXPECT_EQ((*got)->layers[l].blob.view(), c.encoded->layers[l]);
    }
  }
  EXPECT_EQ((*store)->Stats().corrupt_records, 0u);
}

}  // namespace
}  // namespace ragkv::kvstore
