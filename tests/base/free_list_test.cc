// FreeList against a naive reference (a plain list scanned linearly), its
// limits, move-only items, and concurrent use.
#include "base/free_list.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ragkv {
namespace {

using Limits = FreeListLimits;

// Naive: the contract of FreeList, written the obvious way. Items are ids;
// bytes_of[id] is an item's size.
class Naive {
 public:
  explicit Naive(Limits l) : l_(l) {}
  // The smallest item >= min_bytes; among equals the one put first.
  int Take(size_t min_bytes, const std::vector<size_t>& bytes_of) {
    int best = -1;
    size_t at = 0;
    for (size_t i = 0; i < kept_.size(); ++i) {
      const size_t b = bytes_of[kept_[i]];
      if (b >= min_bytes && (best < 0 || b < bytes_of[best])) best = kept_[i], at = i;
    }
    if (best >= 0) kept_.erase(kept_.begin() + at);
    return best;
  }
  bool Put(int id, const std::vector<size_t>& bytes_of) {
    if (bytes_of[id] > l_.max_item_bytes || kept_.size() >= l_.max_items) return false;
    kept_.push_back(id);
    bool kept = true;
    while (Total(bytes_of) > l_.max_total_bytes) {
      // Drop the smallest; among equals the one put first.
      size_t at = 0;
      for (size_t i = 1; i < kept_.size(); ++i) {
        if (bytes_of[kept_[i]] < bytes_of[kept_[at]]) at = i;
      }
      if (kept_[at] == id) kept = false;
      kept_.erase(kept_.begin() + at);
    }
    return kept;
  }
  size_t Total(const std::vector<size_t>& bytes_of) const {
    size_t t = 0;
    for (int id : kept_) t += bytes_of[id];
    return t;
  }
  size_t size() const { return kept_.size(); }

 private:
  Limits l_;
  std::vector<int> kept_;  // in Put order
};

TEST(FreeListTest, MatchesNaiveReference) {
  std::mt19937 rng(17);
  const Limits cases[] = {
      {},                                 // unlimited
      {4, 1 << 20, SIZE_MAX},             // the Blender's workspaces: 4, each <= cap
      {SIZE_MAX, 5000, 5000},             // KVCachePool: one byte cap for both
      {3, 4000, 9000},                    // all three
      {SIZE_MAX, 0, 0},                   // keeps nothing but 0-byte items
  };
  for (const Limits& l : cases) {
    SCOPED_TRACE(testing::Message() << "limits " << l.max_items << " " << l.max_item_bytes << " "
                                    << l.max_total_bytes);
    FreeList<int> list(l);
    Naive naive(l);
    std::vector<size_t> bytes_of;
    uint64_t hits = 0, misses = 0;
    for (int step = 0; step < 3000; ++step) {
      if (rng() % 2 == 0) {
        const int id = static_cast<int>(bytes_of.size());
        bytes_of.push_back(rng() % 8 == 0 ? 2048 : rng() % 6000);  // some equal sizes
        ASSERT_EQ(list.Put(id, bytes_of[id]), naive.Put(id, bytes_of)) << "step " << step;
      } else {
        const size_t want = rng() % 3 == 0 ? 0 : rng() % 6000;
        const int expect = naive.Take(want, bytes_of);
        std::optional<int> got = list.Take(want);
        ASSERT_EQ(got.has_value(), expect >= 0) << "step " << step;
        if (got) {
          ASSERT_EQ(*got, expect) << "step " << step;
          ++hits;
        } else {
          ++misses;
        }
      }
      const auto s = list.stats();
      ASSERT_EQ(s.idle_items, naive.size());
      ASSERT_EQ(s.idle_bytes, naive.Total(bytes_of));
      ASSERT_LE(s.idle_items, l.max_items);
      ASSERT_LE(s.idle_bytes, l.max_total_bytes);
      ASSERT_EQ(s.hits, hits);
      ASSERT_EQ(s.misses, misses);
    }
  }
}

TEST(FreeListTest, MoveOnlyItemsAreHandedBackIntact) {
  FreeList<std::unique_ptr<std::vector<float>>> list({2, SIZE_MAX, SIZE_MAX});
  auto a = std::make_unique<std::vector<float>>(100, 1.0f);
  const float* a_data = a->data();
  EXPECT_TRUE(list.Put(std::move(a), 400));
  EXPECT_TRUE(list.Put(std::make_unique<std::vector<float>>(10), 40));
  EXPECT_FALSE(list.Put(std::make_unique<std::vector<float>>(10), 40));  // max_items
  auto got = list.Take(100);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ((*got)->data(), a_data);  // the same memory, not a copy
  EXPECT_EQ((*got)->size(), 100u);
  EXPECT_FALSE(list.Take(100).has_value());
}

TEST(FreeListTest, ConcurrentTakeAndPutLoseNothing) {
  // Items count themselves: at the end every item made is either kept by
  // the list or was destroyed, and the kept ones are within the limits.
  static std::atomic<int> alive{0};
  struct Item {
    Item() { ++alive; }
    Item(const Item&) = delete;
    ~Item() { --alive; }
  };
  const Limits l{8, 3000, 12000};
  {
    FreeList<std::unique_ptr<Item>> list(l);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&list, t] {
        std::mt19937 rng(t);
        for (int i = 0; i < 2000; ++i) {
          const size_t bytes = rng() % 4000;
          std::optional<std::unique_ptr<Item>> got = list.Take(bytes);
          list.Put(got ? std::move(*got) : std::make_unique<Item>(), bytes);
        }
      });
    }
    for (auto& th : threads) th.join();
    const auto s = list.stats();
    EXPECT_EQ(static_cast<int>(s.idle_items), alive.load());
    EXPECT_LE(s.idle_items, l.max_items);
    EXPECT_LE(s.idle_bytes, l.max_total_bytes);
    EXPECT_EQ(s.hits + s.misses, 4u * 2000u);
  }
  EXPECT_EQ(alive.load(), 0);
}

}  // namespace
}  // namespace ragkv
