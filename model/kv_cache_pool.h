// kv_cache_pool.h: KVCachePool, the memory of finished KV caches kept for
// the next one of a like size.
//
// A server that builds one large cache per request (the sidecar's fused
// cache: 16 layers x 1.5k tokens of a 1024-dim model is 100 MB of f32) pays
// the kernel for every fresh page of it: on a VM that is ~25k page faults,
// 240 ms, more than the whole blend of a reused prompt (docs/services.md,
// "Fused-cache pool"). The pool hands such memory out again, zeroed. It is
// a ragkv::FreeList of buffers (base/free_list.h) with one byte cap.
//
// Thread safety: every method may be called concurrently (the FreeList's
// Mutex).
#ifndef RAGKV_MODEL_KV_CACHE_POOL_H_
#define RAGKV_MODEL_KV_CACHE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "base/free_list.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace ragkv::model {

class KVCachePool {
 public:
  // max_idle_bytes: the most memory kept between caches (0: none is kept,
  // every Create allocates).
  explicit KVCachePool(size_t max_idle_bytes)
      : idle_({.max_item_bytes = max_idle_bytes, .max_total_bytes = max_idle_bytes}) {}
  KVCachePool(const KVCachePool&) = delete;
  KVCachePool& operator=(const KVCachePool&) = delete;

  // Create: KVCache::Create (a zeroed cache, the same errors), on the
  // smallest kept buffer that holds it when there is one; a new buffer gets
  // room for a capacity rounded up to 256 tokens, so that the next, slightly
  // longer prompt fits in it too.
  absl::StatusOr<KVCache> Create(const ModelConfig& config, int64_t capacity_tokens);

  // Release: keeps `cache`'s memory for a later Create. When the kept
  // memory would exceed max_idle_bytes the smallest buffers are dropped
  // first (the large ones are the costly ones to fault in again).
  void Release(KVCache&& cache);

  struct Stats {
    uint64_t reused = 0;     // Creates served from kept memory
    uint64_t allocated = 0;  // Creates that allocated
    size_t idle_bytes = 0;   // memory kept now
  };
  Stats stats() const;

 private:
  FreeList<std::vector<float>> idle_;  // sized by capacity() * sizeof(float)
};

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_KV_CACHE_POOL_H_
