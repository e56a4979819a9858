// free_list.h: FreeList<T>, a capped store of idle objects (buffers,
// scratch) kept for reuse, so that a server does not pay for fresh pages on
// every request. Used by model::KVCachePool (fused-cache memory) and the
// Blender's compute workspaces.
//
// Each kept item has a size in bytes, given by the caller when it puts the
// item back (the list never inspects T). Take hands out the smallest kept
// item of at least the bytes asked for (best fit). Put keeps an item unless
// it is larger than max_item_bytes or max_items are already kept; then,
// while the kept bytes exceed max_total_bytes, it drops the smallest kept
// items first (the large ones are the costly ones to fault in again).
// Dropped items are destroyed outside the lock.
//
// Thread safety: every method may be called concurrently (one ragkv::Mutex, base/sync.h).
#ifndef RAGKV_BASE_FREE_LIST_H_
#define RAGKV_BASE_FREE_LIST_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/sync.h"

namespace ragkv {

// FreeListLimits: what a FreeList keeps (every field: no limit by default).
struct FreeListLimits {
  size_t max_items = std::numeric_limits<size_t>::max();        // most items kept
  size_t max_item_bytes = std::numeric_limits<size_t>::max();   // larger: never kept
  size_t max_total_bytes = std::numeric_limits<size_t>::max();  // most bytes kept in all
};

struct FreeListStats {
  uint64_t hits = 0;      // Takes that handed out a kept item
  uint64_t misses = 0;    // Takes that found none large enough
  size_t idle_items = 0;  // items kept now
  size_t idle_bytes = 0;  // their bytes
};

template <typename T>
class FreeList {
 public:
  using Limits = FreeListLimits;
  using Stats = FreeListStats;

  explicit FreeList(Limits limits) : limits_(limits) {}
  FreeList(const FreeList&) = delete;
  FreeList& operator=(const FreeList&) = delete;

  // Take: removes and returns the kept item of the fewest bytes among those
  // of at least `min_bytes` (among equals, the one kept longest); nullopt
  // when there is none.
  std::optional<T> Take(size_t min_bytes) {
    MutexLock lock(&mu_);
    auto it = std::lower_bound(idle_.begin(), idle_.end(), min_bytes,
                               [](const Entry& e, size_t b) { return e.bytes < b; });
    if (it == idle_.end()) {
      ++stats_.misses;
      return std::nullopt;
    }
    std::optional<T> item(std::move(it->item));
    stats_.idle_bytes -= it->bytes;
    idle_.erase(it);
    ++stats_.hits;
    return item;
  }

  // Put: keeps `item` of `bytes` for a later Take, within the limits (see
  // the file comment). Returns whether it was kept.
  bool Put(T item, size_t bytes) {
    if (bytes > limits_.max_item_bytes) return false;  // `item` dies here, unlocked
    std::vector<Entry> dropped;  // destroyed after the lock is released
    bool kept = false;
    {
      MutexLock lock(&mu_);
      if (idle_.size() >= limits_.max_items) return false;
      auto at = std::upper_bound(idle_.begin(), idle_.end(), bytes,
                                 [](size_t b, const Entry& e) { return b < e.bytes; });
      const size_t mine = static_cast<size_t>(at - idle_.begin());
      idle_.insert(at, Entry{bytes, std::move(item)});
      stats_.idle_bytes += bytes;
      size_t n = 0;  // dropped: idle_[0, n), the smallest
      while (stats_.idle_bytes > limits_.max_total_bytes) stats_.idle_bytes -= idle_[n++].bytes;
      kept = mine >= n;
      dropped.assign(std::make_move_iterator(idle_.begin()),
                     std::make_move_iterator(idle_.begin() + n));
      idle_.erase(idle_.begin(), idle_.begin() + n);
    }
    return kept;
  }

  Stats stats() const {
    MutexLock lock(&mu_);
    Stats s = stats_;
    s.idle_items = idle_.size();
    return s;
  }

 private:
  struct Entry {
    size_t bytes;
    T item;
  };

  const Limits limits_;
  mutable Mutex mu_;
  std::vector<Entry> idle_ ABSL_GUARDED_BY(mu_);  // ascending bytes; equals in Put order
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ragkv

#endif  // RAGKV_BASE_FREE_LIST_H_
