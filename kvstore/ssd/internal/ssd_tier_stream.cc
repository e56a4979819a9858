// ssd_tier_stream.cc: SsdTier's layer-wise Put (ssd_tier_impl.h BeginPut).
//
// On disk: BeginPut writes a pending record (meta family, key16 'P', the
// declared bytes and layer count) together with the evictions that make
// room; each AddLayer is one write of
// key16 'L' be32(i); Commit is one batch of the header, the chunk's meta
// record and the pending record's delete, synced with sync_writes (a WAL
// sync also makes every earlier layer write durable). Until Commit no
// header exists, so readers see nothing. An aborted writer deletes its
// layers and pending record; a process killed mid-write leaves the pending
// record, and the next open (LoadIndexLocked) deletes it with its layers
// (not the layers of a chunk of that key committed meanwhile). Keys already
// stored, or being streamed, take the atomic whole-chunk Put instead.
//
// Concurrency with whole-chunk writes of the same key (Stream in
// ssd_tier_impl.h): layer writes hold write_mu_, as Put and Delete do, so a
// Put that lands mid-stream is never overwritten by the stream's later
// layers: the stream is overtaken (the rest skipped, Commit OK, the Put's
// chunk stands); a Delete cancels it (Aborted). The writer refuses layers
// beyond the declared bytes, and BeginPut refuses (ResourceExhausted) a
// chunk that cannot fit beside the live streams' reservations.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kvstore/ssd/internal/ssd_tier_impl.h"

namespace ragkv::kvstore::internal {

class SsdChunkWriter final : public ChunkWriter {
 public:
  SsdChunkWriter(SsdTier* tier, const ChunkKey& key, std::string header, const Meta& meta)
      : tier_(tier), key_(key), header_(std::move(header)), meta_(meta) {}
  ~SsdChunkWriter() override {
    if (!committed_) tier_->AbortStream(key_, meta_);
  }

  absl::Status AddLayer(std::string_view record) override {
    if (committed_ || next_ >= meta_.layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("ssd tier stream ", key_.ToHex(), ": more than ", meta_.layers, " layers"));
    }
    if (header_.size() + bytes_ + record.size() > meta_.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ssd tier stream ", key_.ToHex(), ": layer ", next_, " of ", record.size(),
          " bytes exceeds the ", meta_.bytes, " bytes declared at BeginPut"));
    }
    RETURN_IF_ERROR(tier_->PutStreamLayer(key_, next_, record));
    bytes_ += record.size();
    ++next_;
    return absl::OkStatus();
  }

  absl::Status Commit() override {
    if (committed_ || next_ != meta_.layers) {
      return absl::FailedPreconditionError(absl::StrCat("ssd tier stream ", key_.ToHex(),
                                                        ": commit after ", next_, " of ",
                                                        meta_.layers, " layers"));
    }
    Meta m = meta_;
    m.bytes = header_.size() + bytes_;
    RETURN_IF_ERROR(tier_->CommitStream(key_, header_, m));
    committed_ = true;
    return absl::OkStatus();
  }

 private:
  SsdTier* const tier_;
  const ChunkKey key_;
  const std::string header_;
  const Meta meta_;
  uint32_t next_ = 0;
  uint64_t bytes_ = 0;
  bool committed_ = false;
};

absl::StatusOr<std::unique_ptr<ChunkWriter>> SsdTier::BeginPut(const ChunkKey& key,
                                                               std::string header,
                                                               uint64_t total_bytes) {
  ScopedTimerNs timer(&counters().write_ns);
  absl::StatusOr<Fingerprint> fp = PeekFingerprint(header);
  absl::StatusOr<uint32_t> layers = PeekNumLayers(header);
  if (!fp.ok() || !layers.ok() || *layers == 0 || total_bytes <= header.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ssd tier BeginPut: malformed chunk for key ", key.ToHex()));
  }
  RETURN_IF_ERROR(CheckChunkBytes(total_bytes));
  MutexLock write_lock(&write_mu_);
  if (write_failed_) RETURN_IF_ERROR(RecoverAfterWriteErrorLocked());
  ReaderMutexLock db_lock(&db_mu_);
  if (db_ == nullptr) return Closed();
  Meta meta;
  meta.bytes = total_bytes;
  meta.layers = *layers;
  meta.fingerprint = *fp;
  std::vector<std::pair<ChunkKey, Meta>> victims;
  {
    MutexLock lock(&mu_);
    if (streaming_.contains(key) || index_.contains(key)) {
      // A concurrent duplicate, or a replacement of a stored chunk: gathered
      // and written as one atomic Put, so the stored chunk stays readable
      // (and intact if this write is cut) until the new one is committed.
      return NewBufferingWriter(std::move(header), meta.layers,
                                [this, key](std::shared_ptr<const EncodedChunk> c) { return Put(key, std::move(c)); });
    }
    ASSIGN_OR_RETURN(victims, PickVictimsLocked(key, total_bytes, 0));
    meta.seq = next_seq_++;
  }
  rocksdb::WriteBatch batch;
  for (const auto& [k, m] : victims) AddDeleteLocked(&batch, k, m);
  batch.Put(meta_, PendingKey(key), EncodeMeta(meta));
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) {
    write_failed_ = true;
    db_up_.store(false);
    counters().errors.fetch_add(1, std::memory_order_relaxed);
    return FromRocks(s, absl::StrCat("begin put ", key.ToHex()));
  }
  {
    MutexLock lock(&mu_);
    for (const auto& [k, m] : victims) RemoveIndexLocked(k);
    RemoveIndexLocked(key);
    streaming_[key] = Stream{total_bytes, meta.layers, *fp, StreamFate::kLive};
    used_ += total_bytes;
  }
  counters().evictions.fetch_add(victims.size(), std::memory_order_relaxed);
  return std::unique_ptr<ChunkWriter>(new SsdChunkWriter(this, key, std::move(header), meta));
}

absl::StatusOr<SsdTier::StreamFate> SsdTier::StreamFateOf(const ChunkKey& key) const {
  if (write_failed_) {
    return absl::UnavailableError(absl::StrCat("ssd tier: a write failed during the stream of ",
                                               key.ToHex()));
  }
  MutexLock lock(&mu_);
  auto it = streaming_.find(key);
  if (it == streaming_.end()) {
    return absl::InternalError(absl::StrCat("ssd tier: no live stream of ", key.ToHex()));
  }
  if (it->second.fate == StreamFate::kCancelled) {
    return absl::AbortedError(absl::StrCat("ssd tier: chunk ", key.ToHex(),
                                           " was deleted while it was being written"));
  }
  return it->second.fate;
}

absl::Status SsdTier::PutStreamLayer(const ChunkKey& key, uint32_t layer, std::string_view record) {
  ScopedTimerNs timer(&counters().write_ns);
  // Held across the write: a whole Put or Delete of the key is ordered
  // entirely before or after this layer.
  MutexLock write_lock(&write_mu_);
  ASSIGN_OR_RETURN(StreamFate fate, StreamFateOf(key));
  if (fate == StreamFate::kOvertaken) return absl::OkStatus();  // the Put's layers stand
  rocksdb::Status s;
  {
    ReaderMutexLock db_lock(&db_mu_);
    if (db_ == nullptr) return Closed();
    s = db_->Put(rocksdb::WriteOptions(), kv_, LayerKey(key, layer),
                 rocksdb::Slice(record.data(), record.size()));
  }
  if (s.ok()) return absl::OkStatus();
  write_failed_ = true;
  db_up_.store(false);
  counters().errors.fetch_add(1, std::memory_order_relaxed);
  absl::Status st = FromRocks(s, absl::StrCat("put layer ", layer, " of ", key.ToHex()));
  RAGKV_LOG(WARNING) << st;
  return st;
}

absl::Status SsdTier::CommitStream(const ChunkKey& key, const std::string& header, Meta meta) {
  ScopedTimerNs timer(&counters().write_ns);
  MutexLock write_lock(&write_mu_);
  ASSIGN_OR_RETURN(StreamFate fate, StreamFateOf(key));
  ReaderMutexLock db_lock(&db_mu_);
  if (db_ == nullptr) return Closed();
  if (fate == StreamFate::kOvertaken) return CommitOvertakenLocked(key);
  rocksdb::WriteBatch batch;
  batch.Put(kv_, HeaderKey(key), rocksdb::Slice(header));
  batch.Put(meta_, rocksdb::Slice(key.AsBytes().data(), 16), EncodeMeta(meta));
  batch.Delete(meta_, PendingKey(key));
  rocksdb::Status s = db_->Write(write_options_, &batch);
  if (!s.ok()) {
    write_failed_ = true;
    db_up_.store(false);
    counters().errors.fetch_add(1, std::memory_order_relaxed);
    absl::Status st = FromRocks(s, absl::StrCat("commit ", key.ToHex()));
    RAGKV_LOG(WARNING) << st;
    return st;
  }
  {
    MutexLock lock(&mu_);
    auto it = streaming_.find(key);
    if (it != streaming_.end()) {
      used_ -= it->second.reserved;
      streaming_.erase(it);
    }
    RemoveIndexLocked(key);  // not expected: a Put during the stream overtakes it
    lru_.push_front(key);
    index_[key] = Entry{meta, lru_.begin()};
    used_ += meta.bytes;
  }
  counters().puts.fetch_add(1, std::memory_order_relaxed);
  counters().bytes_written.fetch_add(meta.bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

void SsdTier::AbortStream(const ChunkKey& key, const Meta& meta) {
  // write_mu_ is held until the reservation is released, so no BeginPut of
  // the key can start (and be deleted by this batch) before the rows are gone.
  MutexLock write_lock(&write_mu_);
  auto release = [&] { ReleaseStream(key); };
  ReaderMutexLock db_lock(&db_mu_);
  if (db_ == nullptr) {  // the pending record is reclaimed at the next open
    release();
    return;
  }
  bool committed_by_other;  // a whole Put of the key landed during the stream
  {
    MutexLock lock(&mu_);
    committed_by_other = index_.contains(key);
  }
  rocksdb::WriteBatch batch;
  for (uint32_t i = 0; i < meta.layers && !committed_by_other; ++i) batch.Delete(kv_, LayerKey(key, i));
  batch.Delete(meta_, PendingKey(key));
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) {
    RAGKV_LOG(WARNING) << FromRocks(s, absl::StrCat("abort ", key.ToHex()))
                       << " (reclaimed at the next open)";
  }
  release();
}

absl::Status SsdTier::CommitOvertakenLocked(const ChunkKey& key) {
  // A whole Put of the key landed during the stream and wrote every layer
  // and the header: only the pending record is left to drop.
  rocksdb::WriteBatch batch;
  batch.Delete(meta_, PendingKey(key));
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) {
    RAGKV_LOG(WARNING) << FromRocks(s, absl::StrCat("drop pending ", key.ToHex()))
                       << " (reclaimed at the next open)";
  }
  ReleaseStream(key);
  return absl::OkStatus();
}

void SsdTier::ReleaseStream(const ChunkKey& key) {
  MutexLock lock(&mu_);
  auto it = streaming_.find(key);
  if (it != streaming_.end()) {
    used_ -= it->second.reserved;
    streaming_.erase(it);
  }
}

absl::Status SsdTier::ReclaimPendingLocked(const std::vector<std::pair<ChunkKey, Meta>>& pending) {
  rocksdb::WriteBatch batch;
  size_t n = 0;
  for (const auto& [key, m] : pending) {
    bool committed;  // a whole Put of the same key committed: its layers stay
    {
      MutexLock lock(&mu_);
      if (streaming_.contains(key)) continue;  // a live writer of this process
      committed = index_.contains(key);
    }
    for (uint32_t i = 0; i < m.layers && !committed; ++i) batch.Delete(kv_, LayerKey(key, i));
    batch.Delete(meta_, PendingKey(key));
    ++n;
  }
  if (n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(FromRocks(db_->Write(write_options_, &batch), "reclaim unfinished writes"));
  RAGKV_LOG(WARNING) << "ssd tier '" << options_.name << "': reclaimed " << n
                     << " unfinished chunk write(s) (a process stopped mid-write; never visible)";
  return absl::OkStatus();
}

}  // namespace ragkv::kvstore::internal
