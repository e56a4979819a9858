#include "kvstore/ram_tier.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kvstore/test_util.h"

namespace ragkv::kvstore {
namespace {

using testing::ChunkSpec;
using testing::MakeChunk;
using testing::TestChunk;

TestChunk Chunk(uint32_t seed, uint8_t fp = 1) {
  ChunkSpec s;
  s.token_seed = seed;
  s.fp_seed = fp;
  return MakeChunk(s);
}

std::unique_ptr<Tier> Ram(uint64_t capacity, EvictionPolicy policy, int shards = 1) {
  RamTierOptions o;
  o.capacity_bytes = capacity;
  o.policy = policy;
  o.num_shards = shards;
  auto t = CreateRamTier(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

class RamTierPolicies : public ::testing::TestWithParam<EvictionPolicy> {};

TEST_P(RamTierPolicies, PutGetIsZeroCopyAndPinned) {
  auto tier = Ram(1 << 20, GetParam(), 4);
  TestChunk c = Chunk(1);
  ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  auto h = tier->GetHeader(c.key);
  ASSERT_TRUE(h.ok() && h->has_value());
  EXPECT_EQ((*h)->data(), c.encoded->header.data());  // zero-copy
  auto l2 = testing::ReadLayer(*tier, c.key, 2);
  ASSERT_TRUE(l2.ok() && l2->has_value());
  EXPECT_EQ((*l2)->view(), c.encoded->layers[2]);
  EXPECT_FALSE(testing::ReadLayer(*tier, c.key, 3)->has_value());
  // The pin keeps the bytes alive after Delete.
  std::weak_ptr<const EncodedChunk> weak = c.encoded;
  const std::string expect = c.encoded->layers[2];
  c.encoded.reset();
  ASSERT_TRUE(tier->Delete(c.key).ok());
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ((*l2)->view(), expect);
  PinnedBytes moved = std::move(**l2);
  EXPECT_EQ(moved.view(), expect);
  h->reset();
  l2->reset();
  moved = PinnedBytes();
  EXPECT_TRUE(weak.expired());
  EXPECT_FALSE(*tier->Contains(c.key));
  TierStats st = tier->Stats();
  EXPECT_EQ(st.hits, 3u);  // each ReadChunk: GetHeader and the two ReadLayer
  EXPECT_EQ(st.entries, 0u);
  EXPECT_EQ(st.bytes_used, 0u);
}

TEST_P(RamTierPolicies, StaysWithinBudget) {
  TestChunk probe = Chunk(0);
  const uint64_t per = probe.encoded->TotalBytes() + 256;
  const uint64_t cap = per * 5 + per / 2;
  auto tier = Ram(cap, GetParam());
  for (uint32_t i = 0; i < 20; ++i) {
    TestChunk c = Chunk(i);
    ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
    TierStats st = tier->Stats();
    ASSERT_LE(st.bytes_used, cap);
  }
  TierStats st = tier->Stats();
  EXPECT_EQ(st.entries, 5u);
  EXPECT_EQ(st.evictions, 15u);
  // Oversized: rejected, nothing lost.
  ChunkSpec big;
  big.tokens = 4000;
  TestChunk b = MakeChunk(big);
  absl::Status s = tier->Put(b.key, b.encoded);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(tier->Stats().entries, 5u);
}

INSTANTIATE_TEST_SUITE_P(Both, RamTierPolicies,
                         ::testing::Values(EvictionPolicy::kLru, EvictionPolicy::kS3Fifo));

TEST(RamTier, LruEvictsLeastRecentlyUsed) {
  TestChunk probe = Chunk(0);
  const uint64_t per = probe.encoded->TotalBytes() + 256;
  auto tier = Ram(per * 3, EvictionPolicy::kLru);
  std::vector<TestChunk> c;
  for (uint32_t i = 0; i < 4; ++i) c.push_back(Chunk(i));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier->Put(c[i].key, c[i].encoded).ok());
  ASSERT_TRUE(tier->GetHeader(c[0].key)->has_value());  // 0 is now most recent
  ASSERT_TRUE(tier->Put(c[3].key, c[3].encoded).ok());
  EXPECT_TRUE(*tier->Contains(c[0].key));
  EXPECT_FALSE(*tier->Contains(c[1].key));
  EXPECT_TRUE(*tier->Contains(c[2].key));
  EXPECT_TRUE(*tier->Contains(c[3].key));
}

TEST(RamTier, S3FifoResistsScans) {
  // A hot set read repeatedly survives a one-pass scan of many cold chunks
  // under S3-FIFO; under LRU the scan flushes it.
  TestChunk probe = Chunk(0);
  const uint64_t per = probe.encoded->TotalBytes() + 256;
  for (EvictionPolicy p : {EvictionPolicy::kS3Fifo, EvictionPolicy::kLru}) {
    auto tier = Ram(per * 10, p);
    std::vector<TestChunk> hot;
    for (uint32_t i = 0; i < 4; ++i) hot.push_back(Chunk(100 + i));
    for (auto& h : hot) {
      ASSERT_TRUE(tier->Put(h.key, h.encoded).ok());
      ASSERT_TRUE(tier->GetHeader(h.key)->has_value());
    }
    for (uint32_t i = 0; i < 30; ++i) {
      TestChunk cold = Chunk(1000 + i);
      ASSERT_TRUE(tier->Put(cold.key, cold.encoded).ok());
      for (auto& h : hot) (void)tier->GetHeader(h.key);  // hot set keeps being read
    }
    int hot_left = 0;
    for (auto& h : hot) hot_left += *tier->Contains(h.key) ? 1 : 0;
    if (p == EvictionPolicy::kS3Fifo) {
      EXPECT_EQ(hot_left, 4) << "S3-FIFO";
    } else {
      EXPECT_EQ(hot_left, 4) << "LRU (hot items re-read after each insert also survive)";
    }
  }
  // Pure scan without re-reads after the first touch: S3-FIFO keeps the
  // once-re-read hot set in M, LRU loses it.
  for (EvictionPolicy p : {EvictionPolicy::kS3Fifo, EvictionPolicy::kLru}) {
    auto tier = Ram(per * 10, p);
    std::vector<TestChunk> hot;
    for (uint32_t i = 0; i < 4; ++i) hot.push_back(Chunk(200 + i));
    for (auto& h : hot) {
      ASSERT_TRUE(tier->Put(h.key, h.encoded).ok());
      ASSERT_TRUE(tier->GetHeader(h.key)->has_value());
      ASSERT_TRUE(tier->GetHeader(h.key)->has_value());
    }
    for (uint32_t i = 0; i < 12; ++i) {
      TestChunk cold = Chunk(2000 + i);
      ASSERT_TRUE(tier->Put(cold.key, cold.encoded).ok());
    }
    int hot_left = 0;
    for (auto& h : hot) hot_left += *tier->Contains(h.key) ? 1 : 0;
    if (p == EvictionPolicy::kS3Fifo) {
      EXPECT_EQ(hot_left, 4) << "S3-FIFO keeps re-read chunks through a scan";
    } else {
      EXPECT_EQ(hot_left, 0) << "LRU loses them";
    }
  }
}

TEST(RamTier, DeleteByFingerprint) {
  auto tier = Ram(1 << 20, EvictionPolicy::kS3Fifo, 4);
  for (uint32_t i = 0; i < 10; ++i) {
    TestChunk c = Chunk(i, static_cast<uint8_t>(1 + i % 2));
    ASSERT_TRUE(tier->Put(c.key, c.encoded).ok());
  }
  auto n = tier->DeleteByFingerprint(testing::TestFingerprint(2));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5u);
  EXPECT_EQ(tier->Stats().entries, 5u);
  EXPECT_FALSE(*tier->Contains(Chunk(1, 2).key));
  EXPECT_TRUE(*tier->Contains(Chunk(0, 1).key));
}

TEST(RamTier, RejectsMalformedChunksAndBadOptions) {
  auto tier = Ram(1 << 20, EvictionPolicy::kLru);
  auto bad = std::make_shared<EncodedChunk>();
  bad->header = "nope";
  EXPECT_EQ(tier->Put(ChunkKey{}, bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Put(ChunkKey{}, nullptr).code(), absl::StatusCode::kInvalidArgument);
  RamTierOptions o;
  o.capacity_bytes = 0;
  EXPECT_FALSE(CreateRamTier(o).ok());
  o.capacity_bytes = 100;
  o.num_shards = 0;
  EXPECT_FALSE(CreateRamTier(o).ok());
}

TEST(RamTier, ConcurrentReadersAndWriters) {
  TestChunk probe = Chunk(0);
  const uint64_t per = probe.encoded->TotalBytes() + 256;
  for (EvictionPolicy p : {EvictionPolicy::kS3Fifo, EvictionPolicy::kLru}) {
    auto tier = Ram(per * 16, p, 4);
    std::vector<TestChunk> chunks;
    for (uint32_t i = 0; i < 32; ++i) chunks.push_back(Chunk(i));
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        for (int r = 0; r < 200; ++r) {
          const TestChunk& c = chunks[(r * 7 + w) % chunks.size()];
          if (!tier->Put(c.key, c.encoded).ok()) bad++;
          if (r % 50 == 0) (void)tier->Delete(chunks[(r + 3) % chunks.size()].key);
        }
      });
    }
    for (int rd = 0; rd < 4; ++rd) {
      threads.emplace_back([&, rd] {
        for (int r = 0; r < 400; ++r) {
          const TestChunk& c = chunks[(r * 13 + rd) % chunks.size()];
          auto h = tier->GetHeader(c.key);
          if (!h.ok()) bad++;
          if (h.ok() && h->has_value() && (*h)->view() != c.encoded->header) bad++;
          auto l = testing::ReadLayer(*tier, c.key, 1);
          if (l.ok() && l->has_value() && (*l)->view() != c.encoded->layers[1]) bad++;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_LE(tier->Stats().bytes_used, per * 16);
  }
}

}  // namespace
}  // namespace ragkv::kvstore
