// shingle_cache.h: ShingleCache, the near-duplicate demotion's per-chunk
// shingle sets kept between searches (docs/retrieval.md "Near-duplicate
// demotion"). Private to retrieval/.
#ifndef RAGKV_RETRIEVAL_INTERNAL_SHINGLE_CACHE_H_
#define RAGKV_RETRIEVAL_INTERNAL_SHINGLE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "base/sync.h"

namespace ragkv::retrieval::internal {

using Shingles = std::shared_ptr<const std::vector<uint64_t>>;

// ShingleCache: chunk id -> WordShingles(text, n), least recently used
// first out once the kept sets pass `capacity_bytes`. Each entry also keeps
// the xxh3 of the text it was computed from, and a lookup whose text hashes
// differently recomputes: a chunk whose text changed under the same id is
// never given stale shingles. An entry larger than the whole capacity is
// computed and returned but not kept; capacity 0 keeps nothing.
//
// Thread safety: Get may be called concurrently (one mutex, not held while
// shingling).
class ShingleCache {
 public:
  struct Stats {
    int64_t hits = 0, misses = 0, entries = 0;
    size_t bytes = 0;
  };

  ShingleCache(size_t capacity_bytes, int shingle_words);
  ShingleCache(const ShingleCache&) = delete;
  ShingleCache& operator=(const ShingleCache&) = delete;

  // EntryBytes: what an entry of `shingles` hashes counts against the
  // capacity (the hashes plus a fixed estimate of the map slot, list node
  // and shared_ptr block).
  static size_t EntryBytes(size_t shingles);

  // Get: the shingles of chunk `id`, whose text is `text`.
  Shingles Get(int64_t id, std::string_view text) ABSL_LOCKS_EXCLUDED(mu_);
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint64_t text_hash = 0;
    Shingles shingles;
    size_t bytes = 0;
    std::list<int64_t>::iterator lru;  // position in lru_ (front: most recent)
  };
  // Keep: stores (replacing any entry of `id`), then evicts from the back.
  void Keep(int64_t id, uint64_t text_hash, Shingles s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Erase(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  const int words_;
  mutable Mutex mu_;  // base/sync.h: ThreadSanitizer sees it (.ci/run tsan)
  absl::flat_hash_map<int64_t, Entry> map_ ABSL_GUARDED_BY(mu_);
  std::list<int64_t> lru_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ragkv::retrieval::internal

#endif  // RAGKV_RETRIEVAL_INTERNAL_SHINGLE_CACHE_H_
