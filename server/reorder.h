// reorder.h: the exact-prefix reorder pass (issue 40; docs/services.md
// "Exact-prefix reorder"): a request whose documents form an unordered set
// is templated with them in the order whose leading tokens the store holds
// the longest chain of exact prefix blocks for (blend/prefix_source.h: block
// n under PrefixBlockKey(key of block n-1, its tokens), the chain rooted at
// PrefixRootKey of the request's key namespace). Those rows are then served
// by the sidecar's exact-prefix cache: the stored records' rows, loaded,
// never recomputed (pipeline/internal/prefix_cache.h).
//
// Greedy, as LMCache's reorder planner and ContextPilot: while some
// document placed next makes the stored chain longer than others do, the
// best one (ties: the retriever's first) is placed next; the rest keep the
// retriever's order. A candidate placement is scored by the chain of the
// whole prompt with that document next and the others after it in the
// retriever's order; only presence is asked of the store (one batched
// Contains per step, no record read). The chain is looked up exactly as the
// pipeline does for the server's raw prompts: the full blocks of the first
// min(tokens - kReservedTail, max_tokens) tokens.
// Thread safety: a pure function of its arguments (the callbacks' own).
#ifndef RAGKV_SERVER_REORDER_H_
#define RAGKV_SERVER_REORDER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/chunk_key.h"

namespace ragkv::server {

// kReservedTail: the prompt's last tokens no prefix covers (the query, the
// server's last token; and one context row the Blender needs after it).
inline constexpr int64_t kReservedTail = 2;

struct ReorderOptions {
  kvstore::Fingerprint key_fp{};  // the request's key namespace (SaltedFingerprint)
  int block_tokens = 16;          // the sidecar's --prefix-block-tokens
  int64_t max_tokens = 4096;      // the sidecar's --prefix-cache-max-tokens
  size_t max_candidates = 16;     // documents tried per step (the retriever's first)
};

// TokensOf: the prompt's tokens with the documents in `order` (a
// permutation of 0..n-1).
using TokensOf = std::function<absl::StatusOr<std::vector<int32_t>>(const std::vector<int>& order)>;
// StoredKeys: per key, whether the store holds a record under it.
using StoredKeys =
    std::function<absl::StatusOr<std::vector<bool>>(const std::vector<kvstore::ChunkKey>& keys)>;

struct Reordered {
  std::vector<int> order;       // the documents' order to use (identity: unchanged)
  int64_t prefix_before = 0;    // stored exact prefix tokens in the retriever's order
  int64_t prefix_after = 0;     // ... in `order` (>= prefix_before)
  int lookups = 0;              // StoredKeys calls
};

// ChainKeys: the keys of the full blocks of `tokens` the pipeline looks up.
std::vector<kvstore::ChunkKey> ChainKeys(const std::vector<int32_t>& tokens,
                                         const ReorderOptions& o);

// ReorderForPrefix: the greedy order of `n` documents. Errors: the
// callbacks' (the caller keeps the retriever's order).
absl::StatusOr<Reordered> ReorderForPrefix(size_t n, const TokensOf& tokens_of,
                                           const StoredKeys& stored, const ReorderOptions& o);

}  // namespace ragkv::server

#endif  // RAGKV_SERVER_REORDER_H_
