// Tests of ChunkMatcher (raw-token chunk finding) against a ground truth the
// test assembles itself: which chunk it placed where.
#include "retrieval/chunk_matcher.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"

namespace ragkv::retrieval {
namespace {

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> tok(0, 31999);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = tok(rng);
  return t;
}

struct Fixture {
  std::vector<std::vector<int32_t>> chunks;
  ChunkMatcher matcher;
  ChunkMatcher::TokensFn tokens_of = [this](int64_t id)
      -> absl::StatusOr<std::optional<std::vector<int32_t>>> {
    if (id < 0 || id >= static_cast<int64_t>(chunks.size()) || chunks[id].empty()) {
      return std::nullopt;
    }
    return chunks[id];
  };
  explicit Fixture(uint32_t seed, int n = 12) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> len(20, 140);
    for (int i = 0; i < n; ++i) {
      chunks.push_back(RandomTokens(rng, len(rng)));
      matcher.Add(i, chunks.back());
    }
  }
  std::vector<ChunkMatch> Find(const std::vector<int32_t>& p) {
    auto r = matcher.Find(p, tokens_of);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<ChunkMatch>{};
  }
};

ChunkMatch Whole(int64_t id, int64_t at, int64_t n) { return {id, at, 0, n, n}; }

// Shuffled, shifted (random filler between), repeated chunks: every placed
// chunk is found whole at its position, and nothing else is.
TEST(ChunkMatcher, FindsEveryChunkShuffledShiftedAndRepeated) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Fixture f(seed);
    std::mt19937 rng(seed * 7919);
    std::vector<int> order;
    for (int i = 0; i < 12; ++i) order.push_back(i);
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(6);
    order.push_back(order[1]);  // a repeat
    std::vector<int32_t> prompt;
    std::vector<ChunkMatch> truth;
    std::uniform_int_distribution<int> gap(0, 30);
    for (int id : order) {
      const std::vector<int32_t> filler = RandomTokens(rng, gap(rng));
      prompt.insert(prompt.end(), filler.begin(), filler.end());
      truth.push_back(Whole(id, prompt.size(), f.chunks[id].size()));
      prompt.insert(prompt.end(), f.chunks[id].begin(), f.chunks[id].end());
    }
    EXPECT_EQ(f.Find(prompt), truth) << "seed " << seed;
  }
}

TEST(ChunkMatcher, NoFalseHitsInUnrelatedOrPartialText) {
  Fixture f(3);
  std::mt19937 rng(99);
  EXPECT_TRUE(f.Find(RandomTokens(rng, 20000)).empty());
  // Half of a long chunk is another text, not the chunk.
  const auto& c = *std::max_element(f.chunks.begin(), f.chunks.end(),
                                    [](auto& a, auto& b) { return a.size() < b.size(); });
  std::vector<int32_t> half(c.begin(), c.begin() + c.size() / 2);
  EXPECT_TRUE(f.Find(half).empty());
  // One token changed in the middle: no match either.
  std::vector<int32_t> edited = c;
  edited[edited.size() / 2] ^= 1;
  EXPECT_TRUE(f.Find(edited).empty());
}

// A chunk whose first tokens tokenized differently in context: its other
// rows are found, the changed ones are left to be fresh.
TEST(ChunkMatcher, BoundaryTokensThatDifferAreLeftOut) {
  Fixture f(5);
  std::mt19937 rng(5);
  f.chunks[4] = RandomTokens(rng, 60);
  f.matcher.Add(4, f.chunks[4]);
  const std::vector<int32_t>& c = f.chunks[4];
  std::vector<int32_t> prompt = {7, 8, 9, 31001, 31002};  // c[0] became two other tokens
  prompt.insert(prompt.end(), c.begin() + 1, c.end() - 1);
  prompt.push_back(31003);  // and its last token another one
  const int64_t n = c.size();
  EXPECT_EQ(f.Find(prompt), (std::vector<ChunkMatch>{{4, 5, 1, n - 1, n}}));
}

// Chunks that overlap in the text (the chunker's overlap): the first whole,
// the next one without the rows the first already covers.
TEST(ChunkMatcher, OverlapsResolveDeterministically) {
  std::mt19937 rng(11);
  const std::vector<int32_t> text = RandomTokens(rng, 200);
  Fixture f(1, 0);
  f.chunks = {std::vector<int32_t>(text.begin(), text.begin() + 120),
              std::vector<int32_t>(text.begin() + 90, text.end())};
  f.matcher.Add(0, f.chunks[0]);
  f.matcher.Add(1, f.chunks[1]);
  EXPECT_EQ(f.Find(text), (std::vector<ChunkMatch>{{0, 0, 0, 120, 120}, {1, 120, 30, 110, 110}}));
  // Same answer when indexed in the other order.
  ChunkMatcher other;
  other.Add(1, f.chunks[1]);
  other.Add(0, f.chunks[0]);
  EXPECT_EQ(other.Find(text, f.tokens_of).value(), f.Find(text));
}

// Chunks shorter than the minimum are never matched (a 5-token chunk would
// match wherever its 5 tokens occur); with a lower minimum they match whole
// only; removed chunks never.
TEST(ChunkMatcher, ShortChunksAndRemovedChunks) {
  Fixture f(1, 0);
  f.chunks = {{1, 2, 3, 4, 5}, std::vector<int32_t>(40, 0)};
  for (int i = 0; i < 40; ++i) f.chunks[1][i] = 100 + i;
  f.matcher.Add(0, f.chunks[0]);
  f.matcher.Add(1, f.chunks[1]);
  std::vector<int32_t> p = {9, 1, 2, 3, 4, 5, 9, 1, 2, 3, 4};
  p.insert(p.end(), f.chunks[1].begin(), f.chunks[1].end());
  EXPECT_EQ(f.Find(p), (std::vector<ChunkMatch>{Whole(1, 11, 40)}));
  EXPECT_EQ(f.matcher.size(), 1u);
  ChunkMatcher low({.min_chunk_tokens = 4});
  low.Add(0, f.chunks[0]);
  low.Add(1, f.chunks[1]);
  EXPECT_EQ(low.Find(p, f.tokens_of).value(),
            (std::vector<ChunkMatch>{Whole(0, 1, 5), Whole(1, 11, 40)}));
  low.Remove(0);
  EXPECT_EQ(low.Find(p, f.tokens_of).value(), (std::vector<ChunkMatch>{Whole(1, 11, 40)}));
  EXPECT_EQ(low.size(), 1u);
}

// A periodic run (one token repeated) stays linear and resolves to
// back-to-back copies.
TEST(ChunkMatcher, PeriodicRunsResolveToConsecutiveCopies) {
  Fixture f(1, 0);
  f.chunks = {std::vector<int32_t>(32, 42)};
  f.matcher.Add(0, f.chunks[0]);
  const std::vector<ChunkMatch> m = f.Find(std::vector<int32_t>(100000, 42));
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m[0], Whole(0, 0, 32));
  for (size_t i = 1; i < m.size(); ++i) EXPECT_EQ(m[i].prompt_begin, m[i - 1].prompt_end());
}

}  // namespace
}  // namespace ragkv::retrieval
