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
  std::vector<float> storage;
  {
    absl::MutexLock lock(&mu_);
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->capacity() >= need && (best == idle_.end() || it->capacity() < best->capacity())) {
        best = it;
      }
    }
    if (best != idle_.end()) {
      storage = std::move(*best);
      idle_.erase(best);
      stats_.idle_bytes -= Bytes(storage);
      ++stats_.reused;
    } else {
      ++stats_.allocated;
    }
  }
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
  if (bytes == 0 || bytes > max_idle_bytes_) return;
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(storage));
  stats_.idle_bytes += bytes;
  std::sort(idle_.begin(), idle_.end(),
            [](const auto& a, const auto& b) { return a.capacity() > b.capacity(); });
  while (stats_.idle_bytes > max_idle_bytes_) {
    stats_.idle_bytes -= Bytes(idle_.back());
    idle_.pop_back();
  }
}

KVCachePool::Stats KVCachePool::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace ragkv::model
