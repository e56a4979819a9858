// ShingleCache: the near-duplicate demotion's shingle sets, checked against
// WordShingles computed afresh (the function itself is checked against
// naive word-tuple sets in embedder_bm25_test.cc), with LRU eviction by
// bytes, stale texts and concurrent readers.
#include "retrieval/internal/shingle_cache.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "retrieval/internal/text.h"

namespace ragkv::retrieval::internal {
namespace {

constexpr int kWords = 5;

// Text(i, words): `words` distinct words, different for every i.
std::string Text(int i, int words) {
  std::string t;
  for (int w = 0; w < words; ++w) absl::StrAppend(&t, w ? " " : "", "w", i, "x", w);
  return t;
}

// Footprint of one entry of `words` distinct words, as the cache counts it.
size_t Bytes(int words) { return ShingleCache::EntryBytes(words - kWords + 1); }

TEST(ShingleCache, GivesWhatWordShinglesGives) {
  ShingleCache cache(1 << 20, kWords);
  for (int i = 0; i < 4; ++i) {
    const std::string t = Text(i, 40 + i);
    EXPECT_EQ(*cache.Get(i, t), WordShingles(t, kWords));
    EXPECT_EQ(*cache.Get(i, t), WordShingles(t, kWords));  // the kept copy
  }
  const ShingleCache::Stats s = cache.stats();
  EXPECT_EQ(s.misses, 4);
  EXPECT_EQ(s.hits, 4);
  EXPECT_EQ(s.entries, 4);
  EXPECT_EQ(cache.Get(9, "").get()->size(), 0u);  // no words: no shingles
}

TEST(ShingleCache, AChangedTextUnderTheSameIdIsShingledAgain) {
  ShingleCache cache(1 << 20, kWords);
  const std::string a = Text(1, 30), b = Text(2, 30);
  EXPECT_EQ(*cache.Get(7, a), WordShingles(a, kWords));
  EXPECT_EQ(*cache.Get(7, b), WordShingles(b, kWords));
  EXPECT_EQ(cache.stats().misses, 2);
  EXPECT_EQ(cache.stats().entries, 1);  // b replaced a
  EXPECT_EQ(*cache.Get(7, b), WordShingles(b, kWords));
  EXPECT_EQ(cache.stats().hits, 1);
}

TEST(ShingleCache, EvictsTheLeastRecentlyUsedPastItsBytes) {
  // Room for exactly two entries of 50 words.
  ShingleCache cache(2 * Bytes(50) + Bytes(50) / 2, kWords);
  cache.Get(1, Text(1, 50));
  cache.Get(2, Text(2, 50));
  cache.Get(1, Text(1, 50));  // 1 is now the most recent: 2 goes next
  cache.Get(3, Text(3, 50));
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_LE(cache.stats().bytes, 2 * Bytes(50) + Bytes(50) / 2);
  const int64_t misses = cache.stats().misses;
  cache.Get(1, Text(1, 50));
  cache.Get(3, Text(3, 50));
  EXPECT_EQ(cache.stats().misses, misses);  // both kept
  cache.Get(2, Text(2, 50));
  EXPECT_EQ(cache.stats().misses, misses + 1);  // 2 was evicted
}

TEST(ShingleCache, KeepsNothingLargerThanItsCapacity) {
  ShingleCache cache(Bytes(20), kWords);
  const std::string big = Text(1, 400);
  EXPECT_EQ(*cache.Get(1, big), WordShingles(big, kWords));
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.stats().bytes, 0u);
  ShingleCache none(0, kWords);
  EXPECT_EQ(*none.Get(1, Text(1, 10)), WordShingles(Text(1, 10), kWords));
  EXPECT_EQ(none.stats().entries, 0);
}

TEST(ShingleCache, ConcurrentReadersGetTheRightSets) {
  // Room for about a third of the 30 texts: hits, misses and evictions
  // interleave across threads.
  ShingleCache cache(10 * Bytes(60), kWords);
  std::vector<std::vector<uint64_t>> want;
  for (int i = 0; i < 30; ++i) want.push_back(WordShingles(Text(i, 60), kWords));
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < 600; ++n) {
        const int i = (n * 7 + t * 3) % 30;
        if (*cache.Get(i, Text(i, 60)) != want[i]) ++wrong[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0);
  EXPECT_LE(cache.stats().bytes, 10 * Bytes(60));
  EXPECT_EQ(cache.stats().hits + cache.stats().misses, 2400);
}

}  // namespace
}  // namespace ragkv::retrieval::internal
