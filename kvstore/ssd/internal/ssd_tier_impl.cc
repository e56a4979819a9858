// ssd_tier_impl.cc: the methods of SsdTier (ssd_tier_impl.h) and the
// record formats of its column families (kvstore/ssd/ssd_tier.h, docs/kvstore.md).
#include "kvstore/ssd/internal/ssd_tier_impl.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/rocksdb_glue.h"
#include "base/status_macros.h"
#include "kvstore/ssd/internal/ssd_tier_internal.h"
#include "rocksdb/table.h"

namespace ragkv::kvstore::internal {
namespace {

constexpr char kKvFamily[] = "kv";
constexpr char kMetaFamily[] = "meta";
constexpr uint8_t kMetaVersion = 1;
constexpr size_t kMetaBytes = 1 + 8 + 4 + 16 + 8;

}  // namespace

// The one place rocksdb::Status is translated (docs/style.md).
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("ssd tier ", std::string(what), ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

std::string HeaderKey(const ChunkKey& k) {
  std::string s(k.AsBytes());
  s.push_back('H');
  return s;
}
std::string LayerKey(const ChunkKey& k, uint32_t layer) {
  std::string s(k.AsBytes());
  s.push_back('L');
  for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((layer >> (8 * i)) & 0xff));
  return s;
}

std::string EncodeMeta(const Meta& m) {
  std::string s(kMetaBytes, '\0');
  char* p = s.data();
  p[0] = static_cast<char>(kMetaVersion);
  std::memcpy(p + 1, &m.bytes, 8);
  std::memcpy(p + 9, &m.layers, 4);
  std::memcpy(p + 13, m.fingerprint.data(), 16);
  std::memcpy(p + 29, &m.seq, 8);
  return s;
}

bool DecodeMeta(std::string_view s, Meta* m) {
  if (s.size() != kMetaBytes || static_cast<uint8_t>(s[0]) != kMetaVersion) return false;
  std::memcpy(&m->bytes, s.data() + 1, 8);
  std::memcpy(&m->layers, s.data() + 9, 4);
  std::memcpy(m->fingerprint.data(), s.data() + 13, 16);
  std::memcpy(&m->seq, s.data() + 29, 8);
  return m->layers > 0 && m->layers <= kMaxLayers;
}

std::string PendingKey(const ChunkKey& k) {
  std::string s(k.AsBytes());
  s.push_back('P');
  return s;
}

// ReadPool: threads that read layers of large chunks for ReadLayers (see
// SsdTierOptions::read_threads). Tasks must not block on anything but I/O.
class ReadPool {
 public:
  explicit ReadPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~ReadPool() {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    for (std::thread& t : threads_) t.join();
  }
  void Submit(std::function<void()> task) {
    {
      MutexLock l(&mu_);
      queue_.push_back(std::move(task));
    }
    cv_.SignalAll();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        MutexLock l(&mu_);
        cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || !queue_.empty();
        });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

SsdTier::SsdTier(const SsdTierOptions& options, rocksdb::Env* env)
    : options_(options), env_(env) {
  read_options_.verify_checksums = true;
  // Layer records carry their own XXH3-64 that TieredStore verifies, so
  // RocksDB's CRC over the same (large) blob is a redundant pass; headers
  // and the index keep RocksDB verification.
  layer_read_options_.verify_checksums = options.verify_rocksdb_checksums;
  write_options_.sync = options.sync_writes;
  if (options.read_threads > 1) read_pool_ = std::make_unique<ReadPool>(options.read_threads - 1);
}

SsdTier::~SsdTier() {
  MutexLock lock(&db_mu_);
  CloseDbLocked();
}

absl::Status SsdTier::Open() {
  MutexLock lock(&db_mu_);
  absl::Status s = OpenDbLocked();
  if (s.ok()) s = LoadIndexLocked();
  if (!absl::IsDataLoss(s)) return s;
  // A damaged database (WAL, SST, MANIFEST): it is only a cache. Move it
  // aside for inspection and start empty; the chunks are recomputed.
  CloseDbLocked();
  const std::string aside =
      absl::StrCat(options_.path, ".corrupt-", absl::ToUnixSeconds(absl::Now()));
  std::error_code ec;
  std::filesystem::rename(options_.path, aside, ec);
  if (ec) {
    return absl::DataLossError(absl::StrCat(s.message(), "; and it cannot be moved aside to ", aside,
                                            ": ", ec.message()));
  }
  RAGKV_LOG(ERROR) << "ssd tier '" << options_.name << "': " << s
                   << " -- quarantined to " << aside << ", starting empty";
  counters().quarantined.fetch_add(1, std::memory_order_relaxed);
  RETURN_IF_ERROR(OpenDbLocked());
  return LoadIndexLocked();
}

absl::Status SsdTier::LoadIndexLocked() {
  {
    MutexLock lock(&mu_);
    index_.clear();
    lru_.clear();
    used_ = 0;
    for (const auto& [k, st] : streaming_) used_ += st.reserved;  // live writers
  }
  std::vector<std::pair<uint64_t, std::pair<ChunkKey, Meta>>> by_seq;
  std::vector<std::pair<ChunkKey, Meta>> pending;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options_, meta_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      std::string_view raw(it->key().data(), it->key().size());
      const bool is_pending = raw.size() == 17 && raw.back() == 'P';
      absl::StatusOr<ChunkKey> key = ChunkKey::FromBytes(is_pending ? raw.substr(0, 16) : raw);
      Meta m;
      if (!key.ok() || !DecodeMeta(std::string_view(it->value().data(), it->value().size()), &m)) {
        RAGKV_LOG(WARNING) << "ssd tier: skipping malformed meta record";
        counters().corrupt_records.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (is_pending) {
        pending.push_back({*key, m});
      } else {
        by_seq.push_back({m.seq, {*key, m}});
      }
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "index scan"));
  }

  std::sort(by_seq.begin(), by_seq.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  {
    MutexLock lock(&mu_);
    for (auto& [seq, km] : by_seq) {
      lru_.push_front(km.first);
      index_[km.first] = Entry{km.second, lru_.begin()};
      used_ += km.second.bytes;
      next_seq_ = std::max(next_seq_, seq + 1);
    }
    for (const auto& [k, m] : pending) next_seq_ = std::max(next_seq_, m.seq + 1);
  }
  RETURN_IF_ERROR(ReclaimPendingLocked(pending));  // after the index: committed keys keep their layers
  MutexLock lock(&mu_);
  RAGKV_LOG(INFO) << "ssd tier '" << options_.name << "' opened at " << options_.path << ": "
                  << index_.size() << " chunks, " << used_ << " bytes";
  // A smaller budget than last time: evict the oldest.
  if (used_ > options_.capacity_bytes) {
    std::vector<std::pair<ChunkKey, Meta>> victims;
    while (used_ > options_.capacity_bytes && !lru_.empty()) victims.push_back(PopLruLocked());
    rocksdb::WriteBatch batch;
    for (const auto& [k, m] : victims) AddDeleteLocked(&batch, k, m);
    RETURN_IF_ERROR(FromRocks(db_->Write(write_options_, &batch), "budget eviction on open"));
    counters().evictions.fetch_add(victims.size(), std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

std::string_view SsdTier::Name() const { return options_.name; }

TierKind SsdTier::Kind() const { return TierKind::kSsd; }

absl::StatusOr<bool> SsdTier::Contains(const ChunkKey& key) {
  MaybeRecoverForRead();
  MutexLock lock(&mu_);
  return index_.contains(key);
}

absl::Status SsdTier::Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) {
  ScopedTimerNs timer(&counters().write_ns);
  if (chunk == nullptr) return absl::InvalidArgumentError("ssd tier Put: null chunk");
  absl::StatusOr<Fingerprint> fp = PeekFingerprint(chunk->header);
  absl::StatusOr<uint32_t> layers = PeekNumLayers(chunk->header);
  if (!fp.ok() || !layers.ok() || *layers != chunk->layers.size() || *layers == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ssd tier Put: malformed chunk for key ", key.ToHex()));
  }
  const uint64_t bytes = chunk->TotalBytes();
  RETURN_IF_ERROR(CheckChunkBytes(bytes));
  MutexLock write_lock(&write_mu_);
  if (write_failed_) RETURN_IF_ERROR(RecoverAfterWriteErrorLocked());
  ReaderMutexLock db_lock(&db_mu_);
  if (db_ == nullptr) return Closed();
  rocksdb::WriteBatch batch;
  std::vector<std::pair<ChunkKey, Meta>> victims;
  std::optional<Meta> old;
  Meta meta;
  meta.bytes = bytes;
  meta.layers = *layers;
  meta.fingerprint = *fp;
  {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    uint64_t freed = 0;
    if (it != index_.end()) {
      old = it->second.meta;
      freed = old->bytes;
    }
    // A live stream of the key is overtaken by this Put: its reservation
    // is released with it (not charged twice).
    auto sit = streaming_.find(key);
    if (sit != streaming_.end()) freed += sit->second.reserved;
    ASSIGN_OR_RETURN(victims, PickVictimsLocked(key, bytes, freed));
    meta.seq = next_seq_++;
  }
  for (const auto& [k, m] : victims) AddDeleteLocked(&batch, k, m);
  if (old.has_value()) {
    for (uint32_t i = meta.layers; i < old->layers; ++i) batch.Delete(kv_, LayerKey(key, i));
  }
  // Layers an overtaken stream wrote beyond this chunk's count.
  for (uint32_t i = meta.layers; i < StreamLayersLocked(key); ++i) batch.Delete(kv_, LayerKey(key, i));
  for (uint32_t i = 0; i < meta.layers; ++i) {
    batch.Put(kv_, LayerKey(key, i), rocksdb::Slice(chunk->layers[i]));
  }
  batch.Put(kv_, HeaderKey(key), rocksdb::Slice(chunk->header));
  batch.Put(meta_, rocksdb::Slice(key.AsBytes().data(), 16), EncodeMeta(meta));
  rocksdb::Status s = db_->Write(write_options_, &batch);
  if (!s.ok()) {
    write_failed_ = true;
    db_up_.store(false);
    counters().errors.fetch_add(1, std::memory_order_relaxed);
    absl::Status st = FromRocks(s, absl::StrCat("put ", key.ToHex()));
    RAGKV_LOG(WARNING) << st;
    return st;  // the batch is atomic: nothing changed on disk or in the index
  }
  {
    MutexLock lock(&mu_);
    for (const auto& [k, m] : victims) RemoveIndexLocked(k);
    RemoveIndexLocked(key);
    lru_.push_front(key);
    index_[key] = Entry{meta, lru_.begin()};
    used_ += bytes;
    EndStreamsLocked(&key, nullptr, /*deleted=*/false);
  }
  counters().evictions.fetch_add(victims.size(), std::memory_order_relaxed);
  counters().puts.fetch_add(1, std::memory_order_relaxed);
  counters().bytes_written.fetch_add(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status SsdTier::Delete(const ChunkKey& key) {
  MutexLock write_lock(&write_mu_);
  ReaderMutexLock db_lock(&db_mu_);
  if (db_ == nullptr) return Closed();
  std::optional<Meta> m;
  {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) m = it->second.meta;
  }
  rocksdb::WriteBatch batch;
  if (m.has_value()) {
    AddDeleteLocked(&batch, key, *m);
  } else {
    // Not indexed (e.g. corrupt meta): still remove the header, which
    // makes the chunk unreachable.
    batch.Delete(kv_, HeaderKey(key));
    batch.Delete(meta_, rocksdb::Slice(key.AsBytes().data(), 16));
  }
  rocksdb::Status s = db_->Write(write_options_, &batch);
  if (!s.ok()) {
    counters().errors.fetch_add(1, std::memory_order_relaxed);
    return FromRocks(s, absl::StrCat("delete ", key.ToHex()));
  }
  MutexLock lock(&mu_);
  EndStreamsLocked(&key, nullptr, /*deleted=*/true);
  if (m.has_value()) {
    RemoveIndexLocked(key);
    counters().deletes.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SsdTier::DeleteByFingerprint(const Fingerprint& fp) {
  MutexLock write_lock(&write_mu_);
  ReaderMutexLock db_lock(&db_mu_);
  if (db_ == nullptr) return Closed();
  std::vector<std::pair<ChunkKey, Meta>> doomed;
  {
    MutexLock lock(&mu_);
    for (const auto& [k, e] : index_) {
      if (e.meta.fingerprint == fp) doomed.push_back({k, e.meta});
    }
    if (doomed.empty()) {
      EndStreamsLocked(nullptr, &fp, /*deleted=*/true);
      return 0;
    }
  }
  rocksdb::WriteBatch batch;
  for (const auto& [k, m] : doomed) AddDeleteLocked(&batch, k, m);
  rocksdb::Status s = db_->Write(write_options_, &batch);
  if (!s.ok()) {
    counters().errors.fetch_add(1, std::memory_order_relaxed);
    return FromRocks(s, "delete by fingerprint");
  }
  MutexLock lock(&mu_);
  EndStreamsLocked(nullptr, &fp, /*deleted=*/true);
  for (const auto& [k, m] : doomed) RemoveIndexLocked(k);
  counters().deletes.fetch_add(doomed.size(), std::memory_order_relaxed);
  return doomed.size();
}

absl::Status SsdTier::Flush() {
  ReaderMutexLock db_lock(&db_mu_);
  if (db_ == nullptr) return Closed();
  return FromRocks(db_->FlushWAL(/*sync=*/true), "flush wal");
}

TierStats SsdTier::Stats() const {
  TierStats st = counters().Snapshot(Name());
  st.up = (db_up_.load(std::memory_order_relaxed)) ? 1 : 0;
  st.capacity_bytes = options_.capacity_bytes;
  MutexLock lock(&mu_);
  st.bytes_used = used_;
  st.entries = index_.size();
  return st;
}

absl::Status SsdTier::Closed() const {
  return absl::UnavailableError(absl::StrCat("ssd tier '", options_.name,
                                             "': database closed after a failed reopen"));
}

void SsdTier::ParallelGet(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf,
                          const std::vector<rocksdb::Slice>& keys,
                          std::vector<rocksdb::PinnableSlice>* values,
                          std::vector<rocksdb::Status>* statuses) {
  struct State {
    std::atomic<size_t> next{0};
    Mutex mu;
    CondVar cv;
    size_t finished ABSL_GUARDED_BY(mu) = 0;
  };
  auto st = std::make_shared<State>();
  const size_t n = keys.size();
  const rocksdb::ReadOptions& ro = layer_read_options_;
  // Work: claims keys until none is left. Captures by pointer: it only
  // dereferences them for a claimed key, i.e. before the caller returns.
  auto work = [st, n, db, cf, &ro, &keys, values, statuses] {
    size_t done = 0;
    for (size_t i = st->next.fetch_add(1); i < n; i = st->next.fetch_add(1)) {
      (*statuses)[i] = db->Get(ro, cf, keys[i], &(*values)[i]);
      ++done;
    }
    if (done == 0) return;
    MutexLock l(&st->mu);
    st->finished += done;
    if (st->finished == n) st->cv.SignalAll();
  };
  const int helpers = std::min<int>(options_.read_threads - 1, static_cast<int>(n) - 1);
  for (int h = 0; h < helpers; ++h) read_pool_->Submit(work);
  work();
  MutexLock l(&st->mu);
  st->cv.Wait(&st->mu, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) { return st->finished == n; });
}

void SsdTier::Unpin(rocksdb::PinnableSlice* v) const {
  if (!v->IsPinned() || v->size() >= options_.min_blob_size) return;
  std::string copy(v->data(), v->size());
  v->Reset();
  v->PinSelf(rocksdb::Slice(copy));
}

absl::Status SsdTier::OpenDbLocked() {
  rocksdb::DBOptions db_options;
  rocksdb::ColumnFamilyOptions kv_options, meta_options;
  internal::MakeSsdRocksOptions(options_, &db_options, &kv_options, &meta_options);
  if (env_ != nullptr) db_options.env = env_;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kKvFamily, kv_options},
      {kMetaFamily, meta_options},
  };
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options_.path, families, &handles, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("open ", options_.path));
  db_.reset(raw);
  db_closed_.store(false);
  const auto* table = kv_options.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
  block_cache_ = table != nullptr ? table->block_cache : nullptr;
  handles_ = std::move(handles);
  kv_ = handles_[1];
  meta_ = handles_[2];
  return absl::OkStatus();
}

void SsdTier::CloseDbLocked() {
  if (db_ == nullptr) return;
  for (rocksdb::ColumnFamilyHandle* h : handles_) {
    rocksdb::Status s = db_->DestroyColumnFamilyHandle(h);
    (void)s;  // nothing useful to do on shutdown
  }
  handles_.clear();
  db_closed_.store(true);
  rocksdb::Status s = db_->Close();
  if (!s.ok()) {
    RAGKV_LOG(WARNING) << "ssd tier '" << options_.name << "' close: " << s.ToString();
  }
  db_.reset();
}

absl::Status SsdTier::RecoverAfterWriteErrorLocked() {
  // Not DB::Resume: after a failed WAL append it flushes through the failed
  // log writer (an assertion in Debian's RocksDB). Reopen, but only once the
  // disk has room: the read-only database keeps serving reads until then.
  if (DiskTooFullToReopen(options_.path)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "ssd tier '", options_.name, "': the disk is full (writes resume once space is freed)"));
  }
  MutexLock db_lock(&db_mu_);
  CloseDbLocked();
  absl::Status s = OpenDbLocked();
  if (s.ok()) s = LoadIndexLocked();
  if (!s.ok()) {
    RAGKV_LOG(WARNING) << "ssd tier '" << options_.name << "': reopen after a write error: " << s;
    return s;
  }
  write_failed_ = false;
  db_up_.store(true);
  RAGKV_LOG(INFO) << "ssd tier '" << options_.name << "': reopened after a write error";
  return absl::OkStatus();
}

void SsdTier::MaybeRecoverForRead() {
  // Only a closed database (a reopen failed): an open read-only one keeps
  // serving reads, and the next write tries the recovery.
  if (db_up_.load(std::memory_order_relaxed) || !db_closed_.load(std::memory_order_relaxed)) return;
  const int64_t now = absl::ToUnixMillis(absl::Now());
  int64_t last = last_read_recovery_ms_.load();
  if (now - last < 1000 || !last_read_recovery_ms_.compare_exchange_strong(last, now)) return;
  MutexLock write_lock(&write_mu_);
  if (write_failed_) RecoverAfterWriteErrorLocked().IgnoreError();
}

void SsdTier::AddDeleteLocked(rocksdb::WriteBatch* batch, const ChunkKey& key, const Meta& m) {
  batch->Delete(kv_, HeaderKey(key));
  for (uint32_t i = 0; i < m.layers; ++i) batch->Delete(kv_, LayerKey(key, i));
  batch->Delete(meta_, rocksdb::Slice(key.AsBytes().data(), 16));
}

absl::Status SsdTier::CheckChunkBytes(uint64_t bytes) const {
  const uint64_t max_bytes =
      options_.max_chunk_bytes > 0 ? options_.max_chunk_bytes : options_.capacity_bytes;
  if (bytes > max_bytes || bytes > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("ssd tier Put: chunk of ", bytes,
                                                     " bytes exceeds the limit of ", max_bytes,
                                                     " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<ChunkKey, Meta>>> SsdTier::PickVictimsLocked(
    const ChunkKey& key, uint64_t bytes, uint64_t freed) {
  std::vector<std::pair<ChunkKey, Meta>> victims;
  auto lit = lru_.end();
  uint64_t projected = used_ - freed;
  while (projected + bytes > options_.capacity_bytes && lit != lru_.begin()) {
    --lit;
    if (*lit == key) continue;
    const Meta& vm = index_.at(*lit).meta;
    victims.push_back({*lit, vm});
    projected -= vm.bytes;
  }
  if (projected + bytes > options_.capacity_bytes) {
    uint64_t reserved = 0;
    for (const auto& [k, st] : streaming_) reserved += st.reserved;
    return absl::ResourceExhaustedError(absl::StrCat(
        "ssd tier '", options_.name, "': a chunk of ", bytes, " bytes does not fit in ",
        options_.capacity_bytes, " bytes while live streams reserve ", reserved,
        " (retry when they finish)"));
  }
  return victims;
}

uint32_t SsdTier::StreamLayersLocked(const ChunkKey& key) const {
  MutexLock lock(&mu_);
  auto it = streaming_.find(key);
  return it == streaming_.end() ? 0 : it->second.layers;
}

void SsdTier::EndStreamsLocked(const ChunkKey* key, const Fingerprint* fp, bool deleted) {
  const StreamFate fate = deleted ? StreamFate::kCancelled : StreamFate::kOvertaken;
  if (key != nullptr) {
    auto it = streaming_.find(*key);
    if (it == streaming_.end()) return;
    it->second.fate = fate;
    if (!deleted) {  // its reservation went to the Put (see Put's `freed`)
      used_ -= it->second.reserved;
      it->second.reserved = 0;
    }
    return;
  }
  for (auto& [k, st] : streaming_) {
    if (st.fingerprint == *fp) st.fate = fate;
  }
}

std::pair<ChunkKey, Meta> SsdTier::PopLruLocked() {
  ChunkKey k = lru_.back();
  Meta m = index_.at(k).meta;
  RemoveIndexLocked(k);
  return {k, m};
}

void SsdTier::RemoveIndexLocked(const ChunkKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  used_ -= it->second.meta.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
}

}  // namespace ragkv::kvstore::internal
