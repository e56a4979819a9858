// ssd_tier_read.cc: the read path of SsdTier (ssd_tier_impl.h): ReadChunk
// and the header and layer reads behind it (the rest is in
// ssd_tier_impl.cc and ssd_tier_stream.cc).
#include "kvstore/ssd/internal/ssd_tier_impl.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ragkv::kvstore::internal {
namespace {

// Layers of at least this many bytes (on average) are read one Get per
// layer, spread over the read threads; smaller ones in one MultiGet.
constexpr uint64_t kParallelLayerBytes = 256 << 10;

}  // namespace

absl::StatusOr<Tier::Blob> SsdTier::ReadHeader(const ChunkKey& key) {
  MaybeRecoverForRead();
  ScopedTimerNs timer(&counters().read_ns);
  ASSIGN_OR_RETURN(Blob b, GetOne(key, HeaderKey(key), read_options_));
  if (!b.has_value()) {
    counters().misses.fetch_add(1, std::memory_order_relaxed);
    return b;
  }
  counters().hits.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it != index_.end()) lru_.splice(lru_.begin(), lru_, it->second.lru);
  return b;
}

absl::StatusOr<Tier::Blob> SsdTier::ReadLayer(const ChunkKey& key, uint32_t layer) {
  ScopedTimerNs timer(&counters().read_ns);
  return GetOne(key, LayerKey(key, layer), layer_read_options_);
}

absl::StatusOr<std::vector<Tier::Blob>> SsdTier::ReadLayers(const ChunkKey& key,
                                                            uint32_t first_layer,
                                                            uint32_t count) {
  ScopedTimerNs timer(&counters().read_ns);
  struct Batch {
    std::vector<std::string> keys;
    std::vector<rocksdb::Slice> slices;
    std::vector<rocksdb::PinnableSlice> values;
    std::vector<rocksdb::Status> statuses;
    std::shared_ptr<rocksdb::Cache> block_cache;  // see Unpin
  };
  auto batch = std::make_shared<Batch>();
  batch->keys.reserve(count);
  for (uint32_t i = 0; i < count; ++i) batch->keys.push_back(LayerKey(key, first_layer + i));
  for (const std::string& k : batch->keys) batch->slices.emplace_back(k);
  batch->values = std::vector<rocksdb::PinnableSlice>(count);
  batch->statuses.resize(count);
  bool parallel = false;
  if (read_pool_ != nullptr && count > 1) {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    parallel = it != index_.end() &&
               it->second.meta.bytes / it->second.meta.layers >= kParallelLayerBytes;
  }
  {
    ReaderMutexLock db_lock(&db_mu_);
    if (db_ == nullptr) return Closed();
    batch->block_cache = block_cache_;
    if (parallel) {
      ParallelGet(db_.get(), kv_, batch->slices, &batch->values, &batch->statuses);
    } else {
      db_->MultiGet(layer_read_options_, kv_, count, batch->slices.data(), batch->values.data(),
                    batch->statuses.data(), /*sorted_input=*/true);
    }
    for (uint32_t i = 0; i < count; ++i) {
      if (batch->statuses[i].ok()) Unpin(&batch->values[i]);
    }
  }
  std::vector<Blob> out(count);
  for (uint32_t i = 0; i < count; ++i) {
    const rocksdb::Status& s = batch->statuses[i];
    if (s.IsNotFound()) continue;
    if (s.IsCorruption()) {
      ReportCorruption(key, s.ToString());
      return std::vector<Blob>(count);
    }
    if (!s.ok()) {
      counters().errors.fetch_add(1, std::memory_order_relaxed);
      return FromRocks(s, "multiget");
    }
    const rocksdb::PinnableSlice& v = batch->values[i];
    counters().bytes_read.fetch_add(v.size(), std::memory_order_relaxed);
    std::shared_ptr<const void> owner(batch, &batch->values[i]);
    out[i] = PinnedBytes(std::string_view(v.data(), v.size()), std::move(owner));
  }
  return out;
}

absl::Status SsdTier::ReadChunk(const ChunkKey& key, ChunkReader& reader, ReadMode mode) {
  ASSIGN_OR_RETURN(Blob header, ReadHeader(key));
  if (!header.has_value()) return absl::OkStatus();
  const LayerRange range = reader.OnHeader(std::move(*header));
  if (range.count == 0) return absl::OkStatus();
  if (uint64_t{range.first} + range.count > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("ssd tier: layers ", range.first, "+",
                                                   range.count, " beyond the limit of ",
                                                   kMaxLayers));
  }
  if (mode == ReadMode::kStream) {
    for (uint32_t l = range.first; l < range.first + range.count; ++l) {
      ASSIGN_OR_RETURN(Blob b, ReadLayer(key, l));
      const bool present = b.has_value();
      if (!reader.OnLayer(l, std::move(b)) || !present) break;
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<Blob> layers, ReadLayers(key, range.first, range.count));
  for (uint32_t i = 0; i < range.count; ++i) {
    Blob b = std::move(layers[i]);
    const bool present = b.has_value();
    if (!reader.OnLayer(range.first + i, std::move(b)) || !present) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<Tier::Blob> SsdTier::GetOne(const ChunkKey& key, const std::string& db_key,
                                           const rocksdb::ReadOptions& ro) {
  struct Value {
    rocksdb::PinnableSlice slice;
    std::shared_ptr<rocksdb::Cache> block_cache;  // see Unpin
  };
  auto value = std::make_shared<Value>();
  rocksdb::Status s;
  {
    ReaderMutexLock db_lock(&db_mu_);
    if (db_ == nullptr) return Closed();
    value->block_cache = block_cache_;
    s = db_->Get(ro, kv_, db_key, &value->slice);
    if (s.ok()) Unpin(&value->slice);
  }
  if (s.IsNotFound()) return Blob();
  if (s.IsCorruption()) {
    ReportCorruption(key, s.ToString());
    return Blob();
  }
  if (!s.ok()) {
    counters().errors.fetch_add(1, std::memory_order_relaxed);
    return FromRocks(s, "get");
  }
  counters().bytes_read.fetch_add(value->slice.size(), std::memory_order_relaxed);
  std::string_view view(value->slice.data(), value->slice.size());
  return PinnedBytes(view, std::move(value));
}

}  // namespace ragkv::kvstore::internal
