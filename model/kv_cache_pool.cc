#include "model/kv_cache_pool.h"

#include <algorithm>
#include <utility>

namespace ragkv::model {
namespace {

constexpr int64_t kRoundTokens = 256;

size_t Bytes(const std::vector<float>& v) { return v.capacity() * sizeof(float); }

}  // namespace

absl::StatusOr<KVCache> KVCachePool::Create(const ModelConfig& config, int64_t capacity_tokens) {
  ModelConfig c = config;
  if (capacity_tokens <= 0 || !c.Validate().ok()) {
    return KVCache::Create(config, capacity_tokens);  // its error
  }
  const size_t need = KVCacheFloats(c, capacity_tokens);
  std::vector<float> storage = idle_.Take(need * sizeof(float)).value_or(std::vector<float>());
  if (storage.capacity() < need) {
    // Room for prompts a little longer than this one (the next one rarely
    // has exactly this length): capacity rounded up to kRoundTokens.
    const int64_t rounded = (capacity_tokens + kRoundTokens - 1) / kRoundTokens * kRoundTokens;
    storage.reserve(KVCacheFloats(c, rounded));
  }
  return KVCache::Create(c, capacity_tokens, std::move(storage));
}

void KVCachePool::Release(KVCache&& cache) {
  std::vector<float> storage = std::move(cache.data_);
  cache = KVCache();
  const size_t bytes = Bytes(storage);
  if (bytes == 0) return;
  // Kept unless larger than the cap; then the smallest go first while the
  // kept memory exceeds it.
  idle_.Put(std::move(storage), bytes);
}

KVCachePool::Stats KVCachePool::stats() const {
  const auto s = idle_.stats();
  return Stats{s.hits, s.misses, s.idle_bytes};
}

}  // namespace ragkv::model
