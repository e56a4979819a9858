#include "kvstore/ram_tier.h"

#include <algorithm>
#include <atomic>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/sync.h"

namespace ragkv::kvstore {
namespace {

// Per-entry bookkeeping charged on top of the blobs (map node, queue node).
constexpr uint64_t kEntryOverheadBytes = 256;
constexpr uint8_t kMaxFreq = 3;

struct Entry {
  ChunkKey key;
  std::shared_ptr<const EncodedChunk> chunk;
  Fingerprint fingerprint{};
  uint64_t charge = 0;
  std::atomic<uint8_t> freq{0};
  bool in_main = false;  // S3-FIFO: in M (else S). LRU: always M.
  std::list<Entry*>::iterator pos;
};

struct Shard {
  mutable Mutex mu;
  uint64_t capacity = 0;
  absl::flat_hash_map<ChunkKey, std::unique_ptr<Entry>> map ABSL_GUARDED_BY(mu);
  std::list<Entry*> small ABSL_GUARDED_BY(mu);  // front = newest
  std::list<Entry*> main ABSL_GUARDED_BY(mu);
  uint64_t small_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t main_bytes ABSL_GUARDED_BY(mu) = 0;
  std::list<std::pair<ChunkKey, uint64_t>> ghost ABSL_GUARDED_BY(mu);  // front = newest
  absl::flat_hash_map<ChunkKey, std::list<std::pair<ChunkKey, uint64_t>>::iterator> ghost_index
      ABSL_GUARDED_BY(mu);
  uint64_t ghost_bytes ABSL_GUARDED_BY(mu) = 0;
};

class RamTier final : public Tier {
 public:
  explicit RamTier(const RamTierOptions& options)
      : options_(options), shards_(static_cast<size_t>(options.num_shards)) {
    for (Shard& s : shards_) s.capacity = options.capacity_bytes / shards_.size();
  }

  std::string_view Name() const override { return options_.name; }
  TierKind Kind() const override { return TierKind::kRam; }

  // ReadChunk: one lookup; header and layers alias the stored chunk.
  absl::Status ReadChunk(const ChunkKey& key, ChunkReader& reader, ReadMode) override {
    std::shared_ptr<const EncodedChunk> chunk;
    Blob header;
    {
      ScopedTimerNs timer(&counters().read_ns);
      chunk = Lookup(key, /*touch=*/true);
      if (chunk == nullptr) {
        counters().misses.fetch_add(1, std::memory_order_relaxed);
        return absl::OkStatus();
      }
      counters().hits.fetch_add(1, std::memory_order_relaxed);
      header = Pin(chunk, -1);
    }
    const LayerRange range = reader.OnHeader(std::move(*header));
    const uint64_t end = uint64_t{range.first} + range.count;
    for (uint64_t l = range.first; l < end; ++l) {
      Blob b = l < chunk->layers.size() ? Pin(chunk, static_cast<int>(l)) : Blob();
      const bool present = b.has_value();
      if (!reader.OnLayer(static_cast<uint32_t>(l), std::move(b)) || !present) break;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Contains(const ChunkKey& key) override {
    Shard& s = ShardFor(key);
    ReaderMutexLock lock(&s.mu);
    return s.map.contains(key);
  }

  // BeginPut: the limit check; the chunk is then Put whole (nullptr).
  absl::StatusOr<std::unique_ptr<ChunkWriter>> BeginPut(const ChunkKey&, std::string,
                                                         uint64_t bytes) override {
    const uint64_t shard_capacity = options_.capacity_bytes / shards_.size();
    if (bytes + kEntryOverheadBytes > shard_capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "ram tier Put: chunk of ", bytes, " bytes exceeds the per-shard budget of ",
          shard_capacity, " bytes (capacity ", options_.capacity_bytes, " / ", shards_.size(),
          " shards)"));
    }
    return std::unique_ptr<ChunkWriter>();
  }

  absl::Status Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) override {
    ScopedTimerNs timer(&counters().write_ns);
    if (chunk == nullptr) return absl::InvalidArgumentError("ram tier Put: null chunk");
    absl::StatusOr<Fingerprint> fp = PeekFingerprint(chunk->header);
    absl::StatusOr<uint32_t> layers = PeekNumLayers(chunk->header);
    if (!fp.ok() || !layers.ok() || *layers != chunk->layers.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ram tier Put: malformed chunk for key ", key.ToHex(),
          fp.ok() ? "" : absl::StrCat(" (", fp.status().message(), ")"),
          layers.ok() && *layers != chunk->layers.size()
              ? absl::StrCat(" (header says ", *layers, " layers, chunk has ", chunk->layers.size(), ")")
              : ""));
    }
    const uint64_t bytes = chunk->TotalBytes();
    const uint64_t charge = bytes + kEntryOverheadBytes;
    Shard& s = ShardFor(key);
    if (charge > s.capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "ram tier Put: chunk of ", bytes, " bytes exceeds the per-shard budget of ", s.capacity,
          " bytes (capacity ", options_.capacity_bytes, " / ", shards_.size(), " shards)"));
    }
    auto entry = std::make_unique<Entry>();
    entry->key = key;
    entry->chunk = std::move(chunk);
    entry->fingerprint = *fp;
    entry->charge = charge;
    std::vector<std::shared_ptr<const EncodedChunk>> dropped;  // freed outside the lock
    {
      MutexLock lock(&s.mu);
      auto it = s.map.find(key);
      if (it != s.map.end()) dropped.push_back(RemoveLocked(s, it));
      uint64_t evicted = 0;
      while (UsedLocked(s) + charge > s.capacity && !s.map.empty()) {
        dropped.push_back(EvictOneLocked(s));
        ++evicted;
      }
      counters().evictions.fetch_add(evicted, std::memory_order_relaxed);
      Entry* e = entry.get();
      bool to_main = options_.policy == EvictionPolicy::kLru;
      if (!to_main) {
        auto g = s.ghost_index.find(key);
        if (g != s.ghost_index.end()) {
          s.ghost_bytes -= g->second->second;
          s.ghost.erase(g->second);
          s.ghost_index.erase(g);
          to_main = true;
        }
      }
      InsertFrontLocked(s, e, to_main);
      s.map.emplace(key, std::move(entry));
    }
    counters().puts.fetch_add(1, std::memory_order_relaxed);
    counters().bytes_written.fetch_add(bytes, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::Status Delete(const ChunkKey& key) override {
    Shard& s = ShardFor(key);
    std::shared_ptr<const EncodedChunk> dropped;
    {
      MutexLock lock(&s.mu);
      auto it = s.map.find(key);
      if (it == s.map.end()) return absl::OkStatus();
      dropped = RemoveLocked(s, it);
    }
    counters().deletes.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> DeleteByFingerprint(const Fingerprint& fp) override {
    uint64_t n = 0;
    for (Shard& s : shards_) {
      std::vector<std::shared_ptr<const EncodedChunk>> dropped;
      MutexLock lock(&s.mu);
      std::vector<ChunkKey> keys;
      for (const auto& [k, e] : s.map) {
        if (e->fingerprint == fp) keys.push_back(k);
      }
      for (const ChunkKey& k : keys) dropped.push_back(RemoveLocked(s, s.map.find(k)));
      n += keys.size();
    }
    counters().deletes.fetch_add(n, std::memory_order_relaxed);
    return n;
  }

  TierStats Stats() const override {
    TierStats st = counters().Snapshot(Name());
    st.capacity_bytes = options_.capacity_bytes;
    for (const Shard& s : shards_) {
      ReaderMutexLock lock(&s.mu);
      st.bytes_used += UsedLocked(s);
      st.entries += s.map.size();
    }
    return st;
  }

 private:
  using MapIt = absl::flat_hash_map<ChunkKey, std::unique_ptr<Entry>>::iterator;

  Shard& ShardFor(const ChunkKey& key) { return shards_[key.Hi64() % shards_.size()]; }

  static uint64_t UsedLocked(const Shard& s) ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
    return s.small_bytes + s.main_bytes;
  }

  // Lookup: the chunk or null; `touch` records an access for eviction.
  std::shared_ptr<const EncodedChunk> Lookup(const ChunkKey& key, bool touch) {
    Shard& s = ShardFor(key);
    if (touch && options_.policy == EvictionPolicy::kLru) {
      MutexLock lock(&s.mu);
      auto it = s.map.find(key);
      if (it == s.map.end()) return nullptr;
      Entry* e = it->second.get();
      s.main.splice(s.main.begin(), s.main, e->pos);
      return e->chunk;
    }
    ReaderMutexLock lock(&s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return nullptr;
    Entry* e = it->second.get();
    if (touch) {
      uint8_t f = e->freq.load(std::memory_order_relaxed);
      while (f < kMaxFreq &&
             !e->freq.compare_exchange_weak(f, static_cast<uint8_t>(f + 1),
                                            std::memory_order_relaxed)) {
      }
    }
    return e->chunk;
  }

  // Pin: a handle on the header (layer < 0) or layer `layer` of `chunk`,
  // sharing ownership of the whole chunk (aliasing shared_ptr).
  Blob Pin(std::shared_ptr<const EncodedChunk> chunk, int layer) {
    const std::string& bytes = layer < 0 ? chunk->header : chunk->layers[static_cast<size_t>(layer)];
    counters().bytes_read.fetch_add(bytes.size(), std::memory_order_relaxed);
    std::shared_ptr<const void> owner(std::move(chunk), &bytes);
    return PinnedBytes(std::string_view(bytes), std::move(owner));
  }

  void InsertFrontLocked(Shard& s, Entry* e, bool to_main) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    e->in_main = to_main;
    if (to_main) {
      s.main.push_front(e);
      e->pos = s.main.begin();
      s.main_bytes += e->charge;
    } else {
      s.small.push_front(e);
      e->pos = s.small.begin();
      s.small_bytes += e->charge;
    }
  }

  void UnlinkLocked(Shard& s, Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    if (e->in_main) {
      s.main.erase(e->pos);
      s.main_bytes -= e->charge;
    } else {
      s.small.erase(e->pos);
      s.small_bytes -= e->charge;
    }
  }

  std::shared_ptr<const EncodedChunk> RemoveLocked(Shard& s, MapIt it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    Entry* e = it->second.get();
    UnlinkLocked(s, e);
    std::shared_ptr<const EncodedChunk> chunk = std::move(e->chunk);
    s.map.erase(it);
    return chunk;
  }

  void AddGhostLocked(Shard& s, const ChunkKey& key, uint64_t charge)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    s.ghost.emplace_front(key, charge);
    s.ghost_index[key] = s.ghost.begin();
    s.ghost_bytes += charge;
    while (s.ghost_bytes > s.capacity && !s.ghost.empty()) {
      s.ghost_bytes -= s.ghost.back().second;
      s.ghost_index.erase(s.ghost.back().first);
      s.ghost.pop_back();
    }
  }

  // EvictOneLocked: removes one entry per the policy; returns its chunk.
  std::shared_ptr<const EncodedChunk> EvictOneLocked(Shard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    if (options_.policy == EvictionPolicy::kLru) {
      return RemoveLocked(s, s.map.find(s.main.back()->key));
    }
    const uint64_t small_target = static_cast<uint64_t>(options_.s3fifo_small_ratio * s.capacity);
    for (;;) {
      if (!s.small.empty() && (s.small_bytes > small_target || s.main.empty())) {
        Entry* t = s.small.back();
        if (t->freq.load(std::memory_order_relaxed) > 0) {
          UnlinkLocked(s, t);
          t->freq.store(0, std::memory_order_relaxed);
          InsertFrontLocked(s, t, /*to_main=*/true);
          continue;
        }
        const ChunkKey key = t->key;
        const uint64_t charge = t->charge;
        std::shared_ptr<const EncodedChunk> c = RemoveLocked(s, s.map.find(key));
        AddGhostLocked(s, key, charge);
        return c;
      }
      Entry* t = s.main.back();
      uint8_t f = t->freq.load(std::memory_order_relaxed);
      if (f > 0) {
        t->freq.store(static_cast<uint8_t>(f - 1), std::memory_order_relaxed);
        s.main.splice(s.main.begin(), s.main, t->pos);
        continue;
      }
      return RemoveLocked(s, s.map.find(t->key));
    }
  }

  const RamTierOptions options_;
  std::vector<Shard> shards_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tier>> CreateRamTier(const RamTierOptions& options) {
  if (options.capacity_bytes == 0) {
    return absl::InvalidArgumentError("RamTierOptions.capacity_bytes must be > 0");
  }
  if (options.num_shards < 1 || options.num_shards > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("RamTierOptions.num_shards must be in [1, 256], got ", options.num_shards));
  }
  if (!(options.s3fifo_small_ratio > 0 && options.s3fifo_small_ratio < 1)) {
    return absl::InvalidArgumentError("RamTierOptions.s3fifo_small_ratio must be in (0, 1)");
  }
  return std::unique_ptr<Tier>(new RamTier(options));
}

}  // namespace ragkv::kvstore
