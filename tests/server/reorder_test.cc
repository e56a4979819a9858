// reorder_test.cc: the exact-prefix reorder pass's greedy order
// (server/reorder.h) on hand-made prompts (a header, the documents' token
// lists in some order, a question) against a fake store of prefix blocks:
// its chain keys are the pipeline's own (kvstore::PrefixBlockKeys over the
// rows the pipeline looks up), the order it picks recovers a stored chain
// whatever order the documents come in (the brute-force best over every
// permutation), it keeps the retriever's order when nothing of the
// documents is stored, and a store error is an error.
#include "server/reorder.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "blend/prefix_source.h"
#include "gtest/gtest.h"

namespace ragkv::server {
namespace {

constexpr int kBlock = 4;

struct Fake {
  std::vector<int32_t> header, question;
  std::vector<std::vector<int32_t>> docs;
  std::set<kvstore::ChunkKey> stored;
  int calls = 0;
  bool fail = false;

  std::vector<int32_t> Tokens(const std::vector<int>& order) const {
    std::vector<int32_t> t = header;
    for (int i : order) t.insert(t.end(), docs[i].begin(), docs[i].end());
    t.insert(t.end(), question.begin(), question.end());
    return t;
  }
  TokensOf tokens_of() const {
    return [this](const std::vector<int>& o) -> absl::StatusOr<std::vector<int32_t>> {
      return Tokens(o);
    };
  }
  StoredKeys store() {
    return [this](const std::vector<kvstore::ChunkKey>& keys) -> absl::StatusOr<std::vector<bool>> {
      ++calls;
      if (fail) return absl::UnavailableError("the sidecar is gone");
      std::vector<bool> out;
      for (const auto& k : keys) out.push_back(stored.count(k) > 0);
      return out;
    };
  }
  // Store: every block a full prefill of `order` (with `question`) stores.
  void Store(const std::vector<int>& order, const std::vector<int32_t>& q, const ReorderOptions& o) {
    std::vector<int32_t> t = header;
    for (int i : order) t.insert(t.end(), docs[i].begin(), docs[i].end());
    t.insert(t.end(), q.begin(), q.end());
    for (const auto& k : ChainKeys(t, o)) stored.insert(k);
  }
  // Chain: the stored exact prefix of `order`, counted naively.
  int64_t Chain(const std::vector<int>& order, const ReorderOptions& o) const {
    int64_t n = 0;
    for (const auto& k : ChainKeys(Tokens(order), o)) {
      if (!stored.count(k)) break;
      n += o.block_tokens;
    }
    return n;
  }
};

// Fake: documents of the given lengths, distinct tokens each.
Fake Make(const std::vector<int>& lengths, uint32_t seed) {
  std::mt19937 rng(seed);
  Fake f;
  f.header = {1, 2, 3, 4, 5};
  f.question = {900, 901, 902, 903, 904, 905};
  for (int len : lengths) {
    std::vector<int32_t> d(len);
    for (auto& t : d) t = 10 + static_cast<int32_t>(rng() % 800);
    f.docs.push_back(d);
  }
  return f;
}

ReorderOptions Options() {
  ReorderOptions o;
  o.key_fp.fill(7);
  o.block_tokens = kBlock;
  o.max_tokens = 4096;
  return o;
}

int64_t BruteForceBest(const Fake& f, const ReorderOptions& o) {
  std::vector<int> p(f.docs.size());
  std::iota(p.begin(), p.end(), 0);
  int64_t best = 0;
  do best = std::max(best, f.Chain(p, o));
  while (std::next_permutation(p.begin(), p.end()));
  return best;
}

TEST(ReorderTest, ChainKeysAreThePipelinesLookup) {
  const ReorderOptions o = Options();
  const Fake f = Make({9, 13, 6}, 1);
  const std::vector<int32_t> t = f.Tokens({0, 1, 2});
  const int64_t rows = static_cast<int64_t>(t.size()) - kReservedTail;  // the raw prompt's limit
  EXPECT_EQ(ChainKeys(t, o),
            kvstore::PrefixBlockKeys(o.key_fp, absl::MakeConstSpan(t).subspan(0, rows), kBlock));
  ReorderOptions capped = o;
  capped.max_tokens = 10;
  EXPECT_EQ(ChainKeys(t, capped),
            kvstore::PrefixBlockKeys(o.key_fp, absl::MakeConstSpan(t).subspan(0, 10), kBlock));
  EXPECT_EQ(ChainKeys(t, capped).size(), 2u);
}

TEST(ReorderTest, AStoredOrderIsRecoveredFromAnyOrder) {
  const ReorderOptions o = Options();
  Fake f = Make({9, 13, 6, 11}, 2);
  const std::vector<int> first = {2, 0, 3, 1};
  f.Store(first, {800, 801, 802}, o);  // a first request, another question
  std::vector<int> p = {0, 1, 2, 3};
  do {
    // The documents are given in order p: the pass sees them as 0..3 of p.
    Fake g = f;
    for (int i = 0; i < 4; ++i) g.docs[i] = f.docs[p[i]];
    auto r = ReorderForPrefix(4, g.tokens_of(), g.store(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int> placed;
    for (int i : r->order) placed.push_back(p[i]);
    EXPECT_EQ(placed, first);
    EXPECT_EQ(r->prefix_before, g.Chain({0, 1, 2, 3}, o));
    EXPECT_EQ(r->prefix_after, g.Chain(r->order, o));
    EXPECT_EQ(r->prefix_after, BruteForceBest(g, o));
    // The stored chain covers the header and every document (less the
    // block cut by the question).
    EXPECT_EQ(r->prefix_after, (5 + 9 + 13 + 6 + 11) / kBlock * kBlock);
  } while (std::next_permutation(p.begin(), p.end()));
}

TEST(ReorderTest, NothingStoredKeepsTheRetrieversOrder) {
  const ReorderOptions o = Options();
  Fake f = Make({9, 13, 6, 11}, 3);
  auto r = ReorderForPrefix(4, f.tokens_of(), f.store(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r->prefix_before, 0);
  EXPECT_EQ(r->prefix_after, 0);
  EXPECT_EQ(r->lookups, 2);  // the retriever's order, one step in which all tie
  // Only the header stored (a blend that reused every document): no
  // document extends it, the order stays.
  f.stored.insert(ChainKeys(f.Tokens({0, 1, 2, 3}), o).front());
  r = ReorderForPrefix(4, f.tokens_of(), f.store(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r->prefix_after, kBlock);
}

// Random stores of several earlier orders: the pass never does worse than
// the retriever's order, reports its own order's chain, and with one stored
// order finds the brute-force best.
TEST(ReorderTest, RandomStoresAgainstBruteForce) {
  const ReorderOptions o = Options();
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 4);
    std::vector<int> lengths;
    // At least a block each: a document shorter than a block may leave
    // every next placement tied (docs/services.md says so).
    for (int i = 0; i < n; ++i) lengths.push_back(kBlock + static_cast<int>(rng() % 14));
    Fake f = Make(lengths, 100 + trial);
    const int earlier = trial % 3 == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < earlier; ++e) {
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      order.resize(1 + rng() % n);  // a request with some of the documents
      f.Store(order, {800 + e}, o);
    }
    auto r = ReorderForPrefix(n, f.tokens_of(), f.store(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int> sorted = r->order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> identity(n);
    std::iota(identity.begin(), identity.end(), 0);
    ASSERT_EQ(sorted, identity) << "not a permutation";
    EXPECT_EQ(r->prefix_before, f.Chain(identity, o));
    EXPECT_EQ(r->prefix_after, f.Chain(r->order, o));
    EXPECT_GE(r->prefix_after, r->prefix_before);
    if (earlier == 1) {
      EXPECT_EQ(r->prefix_after, BruteForceBest(f, o)) << "trial " << trial;
    }
    if (r->prefix_after == r->prefix_before) {
      EXPECT_EQ(r->order, identity);
    }
  }
}

TEST(ReorderTest, AStoreErrorIsAnError) {
  Fake f = Make({9, 13}, 4);
  f.fail = true;
  auto r = ReorderForPrefix(2, f.tokens_of(), f.store(), Options());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ragkv::server
