#include "retrieval/internal/shingle_cache.h"

#include <xxhash.h>

#include <utility>

#include "retrieval/internal/text.h"

namespace ragkv::retrieval::internal {
namespace {

constexpr size_t kEntryOverhead = 128;  // see EntryBytes

}  // namespace

size_t ShingleCache::EntryBytes(size_t shingles) {
  return shingles * sizeof(uint64_t) + kEntryOverhead;
}

ShingleCache::ShingleCache(size_t capacity_bytes, int shingle_words)
    : capacity_(capacity_bytes), words_(shingle_words) {}

Shingles ShingleCache::Get(int64_t id, std::string_view text) {
  const uint64_t h = XXH3_64bits(text.data(), text.size());
  {
    MutexLock lock(&mu_);
    auto it = map_.find(id);
    if (it != map_.end() && it->second.text_hash == h) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.shingles;
    }
    ++misses_;
  }
  std::vector<uint64_t> v = WordShingles(text, words_);
  v.shrink_to_fit();  // WordShingles reserved a slot per word position
  auto s = std::make_shared<const std::vector<uint64_t>>(std::move(v));
  MutexLock lock(&mu_);
  Keep(id, h, s);
  return s;
}

void ShingleCache::Keep(int64_t id, uint64_t text_hash, Shingles s) {
  Erase(id);
  const size_t bytes = EntryBytes(s->capacity());
  if (bytes > capacity_) return;
  lru_.push_front(id);
  map_[id] = Entry{text_hash, std::move(s), bytes, lru_.begin()};
  bytes_ += bytes;
  while (bytes_ > capacity_) Erase(lru_.back());
}

void ShingleCache::Erase(int64_t id) {
  auto it = map_.find(id);
  if (it == map_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  map_.erase(it);
}

ShingleCache::Stats ShingleCache::stats() const {
  MutexLock lock(&mu_);
  return Stats{hits_, misses_, static_cast<int64_t>(map_.size()), bytes_};
}

}  // namespace ragkv::retrieval::internal
