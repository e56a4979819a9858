#include "server/reorder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ragkv::server {
namespace {

// Placement: one order tried, its chain keys and how many of them (from
// the first) the store holds.
struct Placement {
  std::vector<int> order;
  std::vector<kvstore::ChunkKey> keys;
  int64_t blocks = 0;
};

// Score: each placement's stored chain, in one StoredKeys call. The leading
// keys a placement shares with `known`'s stored chain are known to be held
// and not asked again.
absl::Status Score(std::vector<Placement>* ps, const Placement* known, const StoredKeys& stored,
                   int* lookups) {
  std::vector<kvstore::ChunkKey> ask;
  std::vector<std::pair<size_t, size_t>> range;
  for (Placement& p : *ps) {
    int64_t k = 0;
    if (known != nullptr) {
      const int64_t lim = std::min<int64_t>(known->blocks, static_cast<int64_t>(p.keys.size()));
      while (k < lim && p.keys[k] == known->keys[k]) ++k;
    }
    p.blocks = k;
    range.emplace_back(ask.size(), ask.size() + (p.keys.size() - static_cast<size_t>(k)));
    ask.insert(ask.end(), p.keys.begin() + k, p.keys.end());
  }
  if (ask.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::vector<bool> held, stored(ask));
  ++*lookups;
  if (held.size() != ask.size()) {
    return absl::InternalError(
        absl::StrCat("the store answered ", held.size(), " presence bits for ", ask.size(), " keys"));
  }
  for (size_t i = 0; i < ps->size(); ++i) {
    for (size_t j = range[i].first; j < range[i].second && held[j]; ++j) ++(*ps)[i].blocks;
  }
  return absl::OkStatus();
}

absl::StatusOr<Placement> Place(std::vector<int> order, const TokensOf& tokens_of,
                                const ReorderOptions& o) {
  ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, tokens_of(order));
  return Placement{std::move(order), ChainKeys(tokens, o), 0};
}

}  // namespace

std::vector<kvstore::ChunkKey> ChainKeys(const std::vector<int32_t>& tokens,
                                         const ReorderOptions& o) {
  const int64_t limit =
      std::min(static_cast<int64_t>(tokens.size()) - kReservedTail, o.max_tokens);
  if (limit <= 0) return {};
  return kvstore::PrefixBlockKeys(
      o.key_fp, absl::MakeConstSpan(tokens).subspan(0, static_cast<size_t>(limit)),
      o.block_tokens);
}

absl::StatusOr<Reordered> ReorderForPrefix(size_t n, const TokensOf& tokens_of,
                                           const StoredKeys& stored, const ReorderOptions& o) {
  Reordered out;
  std::vector<int> identity(n);
  for (size_t i = 0; i < n; ++i) identity[i] = static_cast<int>(i);
  std::vector<Placement> cur(1);
  ASSIGN_OR_RETURN(cur[0], Place(identity, tokens_of, o));
  RETURN_IF_ERROR(Score(&cur, nullptr, stored, &out.lookups));
  out.prefix_before = cur[0].blocks * o.block_tokens;
  std::vector<int> placed, rest = identity;
  // Each step: the documents of `rest` tried next (the others after it in
  // the retriever's order). When every candidate scores alike the chain
  // ends before them: nothing placed from here on changes it.
  while (rest.size() > 1) {
    const size_t m = std::min(rest.size(), std::max<size_t>(o.max_candidates, 1));
    std::vector<Placement> tries;
    for (size_t c = 0; c < m; ++c) {
      std::vector<int> order = placed;
      order.push_back(rest[c]);
      for (size_t i = 0; i < rest.size(); ++i) {
        if (i != c) order.push_back(rest[i]);
      }
      ASSIGN_OR_RETURN(Placement p, Place(std::move(order), tokens_of, o));
      tries.push_back(std::move(p));
    }
    RETURN_IF_ERROR(Score(&tries, &cur[0], stored, &out.lookups));
    size_t best = 0;
    bool differ = false;
    for (size_t c = 1; c < tries.size(); ++c) {
      differ = differ || tries[c].blocks != tries[0].blocks;
      if (tries[c].blocks > tries[best].blocks) best = c;
    }
    if (!differ) break;
    placed.push_back(rest[best]);
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(best));
    cur[0] = std::move(tries[best]);
  }
  // The greedy step may trade a chain for a shorter one only if the store
  // changed under it; never return an order worse than the retriever's.
  if (cur[0].blocks * o.block_tokens < out.prefix_before) {
    out.order = identity;
    out.prefix_after = out.prefix_before;
  } else {
    out.order = cur[0].order;
    out.prefix_after = cur[0].blocks * o.block_tokens;
  }
  return out;
}

}  // namespace ragkv::server
