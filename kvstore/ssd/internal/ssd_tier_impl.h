// ssd_tier_impl.h: the SSD tier's implementation class (private to kvstore;
// the API is CreateSsdTier in kvstore/ssd/ssd_tier.h, the test/bench seams are in
// ssd_tier_internal.h). Layout, budget and error handling: kvstore/ssd/ssd_tier.h.
//
// Methods are defined in ssd_tier_impl.cc (reads: ssd_tier_read.cc,
// the streaming writer: ssd_tier_stream.cc); the factory (option checks, the
// O_DIRECT probe) in kvstore/ssd/ssd_tier.cc.
//
// Thread safety: all public methods are thread-safe.
#ifndef RAGKV_KVSTORE_SSD_INTERNAL_SSD_TIER_IMPL_H_
#define RAGKV_KVSTORE_SSD_INTERNAL_SSD_TIER_IMPL_H_

#include <cstdint>
#include <list>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/chunk_key.h"
#include "base/sync.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/ssd/ssd_tier.h"
#include "kvstore/tier.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/status.h"
#include "rocksdb/write_batch.h"

namespace ragkv::kvstore::internal {

// Meta: a chunk's record in the "meta" family (encoded in ssd_tier_impl.cc);
// the in-memory index keeps a copy per chunk.
struct Meta {
  uint64_t bytes = 0;
  uint32_t layers = 0;
  Fingerprint fingerprint{};
  uint64_t seq = 0;
};

// Record keys and formats of the two families (docs/kvstore.md), and the
// one translation of rocksdb::Status. Defined in ssd_tier_impl.cc.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what);
std::string HeaderKey(const ChunkKey& k);               // kv: key16 'H'
std::string LayerKey(const ChunkKey& k, uint32_t layer);  // kv: key16 'L' be32
std::string PendingKey(const ChunkKey& k);              // meta: key16 'P'
std::string EncodeMeta(const Meta& m);
bool DecodeMeta(std::string_view s, Meta* m);

// ReadPool: threads that read layers of large chunks for GetLayers (see
// SsdTierOptions::read_threads). Defined in ssd_tier_impl.cc.
class ReadPool;

class SsdTier final : public Tier {
 public:
  SsdTier(const SsdTierOptions& options, rocksdb::Env* env);
  ~SsdTier() override;

  // Open: opens the database and loads the index.
  absl::Status Open();

  // LoadIndexLocked: (re)builds the index from the meta family; enforces the
  // budget.
  absl::Status LoadIndexLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);

  std::string_view Name() const override;
  TierKind Kind() const override;

  // ReadChunk: the header (ReadHeader), then the requested layers: one
  // ReadLayers (a MultiGet, or ParallelGet for large layers) unless
  // kStream, which reads them one by one (ReadLayer).
  absl::Status ReadChunk(const ChunkKey& key, ChunkReader& reader, ReadMode mode) override;
  // ReadHeader: the header record; counts a hit or a miss and refreshes
  // the key's LRU position. ReadLayer / ReadLayers: layer records (absent:
  // std::nullopt), counting bytes and time only (ReadLayer is also the
  // SsdStoredLayer test seam).
  absl::StatusOr<Blob> ReadHeader(const ChunkKey& key);
  absl::StatusOr<Blob> ReadLayer(const ChunkKey& key, uint32_t layer);
  absl::StatusOr<std::vector<Blob>> ReadLayers(const ChunkKey& key, uint32_t first_layer,
                                               uint32_t count);
  absl::StatusOr<bool> Contains(const ChunkKey& key) override;
  absl::Status Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) override;
  // BeginPut: streams layers to the database as they arrive (defined in
  // ssd_tier_stream.cc): a pending record (meta: key16 'P') and the budget
  // reservation first, each layer as its own write, then header + meta in
  // one batch (synced with sync_writes). Open reclaims pending records a
  // dead process left, with their layers. A key already stored or being
  // streamed gets a buffering writer (the atomic Put at Commit). Never
  // returns a null writer.
  absl::StatusOr<std::unique_ptr<ChunkWriter>> BeginPut(const ChunkKey& key, std::string header,
                                                         uint64_t total_bytes) override;
  absl::Status Delete(const ChunkKey& key) override;
  absl::StatusOr<uint64_t> DeleteByFingerprint(const Fingerprint& fp) override;
  absl::Status Flush() override;
  TierStats Stats() const override;

 private:
  friend class SsdChunkWriter;
  // Stream: a live streaming writer's reservation and fate. A whole Put of
  // its key overtakes it (its remaining layers are skipped and its Commit
  // only drops the pending record: the Put's chunk stands, as if the
  // stream had committed just before it); a Delete of its key (or
  // fingerprint) cancels it (Aborted on its next layer or Commit).
  enum class StreamFate { kLive, kOvertaken, kCancelled };
  struct Stream {
    uint64_t reserved = 0;
    uint32_t layers = 0;
    Fingerprint fingerprint{};
    StreamFate fate = StreamFate::kLive;
  };
  // The streaming writer's steps (ssd_tier_stream.cc).
  // StreamFateOf: the live stream's fate, or an error to end it with.
  absl::StatusOr<StreamFate> StreamFateOf(const ChunkKey& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status PutStreamLayer(const ChunkKey& key, uint32_t layer, std::string_view record);
  absl::Status CommitStream(const ChunkKey& key, const std::string& header, Meta meta);
  void AbortStream(const ChunkKey& key, const Meta& meta);
  // CommitOvertakenLocked: Commit of a stream a whole Put overtook: drops
  // the pending record (the Put's chunk stands). OK.
  absl::Status CommitOvertakenLocked(const ChunkKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) ABSL_SHARED_LOCKS_REQUIRED(db_mu_);
  // ReleaseStream: forgets the stream of `key` and frees its reservation.
  void ReleaseStream(const ChunkKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  // ReclaimPendingLocked: deletes the pending records (and their layers)
  // that no live writer of this process owns; called by LoadIndexLocked.
  absl::Status ReclaimPendingLocked(const std::vector<std::pair<ChunkKey, Meta>>& pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);
  // CheckChunkBytes: ResourceExhausted when a chunk of `bytes` exceeds
  // max_chunk_bytes (or the capacity).
  absl::Status CheckChunkBytes(uint64_t bytes) const;
  // PickVictimsLocked: LRU chunks other than `key` to evict so that `bytes`
  // more fit beside `freed` bytes released; ResourceExhausted (nothing
  // picked) when they cannot fit even with every stored chunk evicted,
  // because live streams hold the rest of the capacity.
  absl::StatusOr<std::vector<std::pair<ChunkKey, Meta>>> PickVictimsLocked(const ChunkKey& key,
                                                                           uint64_t bytes,
                                                                           uint64_t freed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EndStreamsLocked: marks the live stream of `key` (or, with `fp`, every
  // stream of that fingerprint) as overtaken by a whole Put (`deleted`
  // false) or cancelled by a Delete (true). Called with write_mu_ held,
  // after the write that overtakes them.
  void EndStreamsLocked(const ChunkKey* key, const Fingerprint* fp, bool deleted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StreamLayersLocked: the layer count of the live stream of `key` (0:
  // none). Called with write_mu_ held.
  uint32_t StreamLayersLocked(const ChunkKey& key) const ABSL_LOCKS_EXCLUDED(mu_);
  struct Entry {
    Meta meta;
    std::list<ChunkKey>::iterator lru;
  };

  absl::Status Closed() const;

  // ParallelGet: one Get per key, spread over the calling thread and up to
  // read_threads-1 pool threads, so that the device reads one layer while
  // another is copied and several requests are in flight. Returns when every
  // key has been read. The caller holds db_mu_ (shared) throughout, which
  // keeps `db` open; a pool task that starts after all keys were claimed
  // touches nothing.
  void ParallelGet(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf,
                   const std::vector<rocksdb::Slice>& keys,
                   std::vector<rocksdb::PinnableSlice>* values,
                   std::vector<rocksdb::Status>* statuses);

  // Unpin: makes `v` own its bytes, so that no handle outlives (or blocks) a
  // reopen by pointing into a block-cache entry. Memtable hits are already
  // copies (not pinned). A value of min_blob_size bytes or more is a blob:
  // RocksDB hands it over pinned to its own BlobContents buffer (no blob
  // cache is configured), which is independent of the database, so it is
  // kept as is; copying it (twice: into a string, then into the slice) used
  // to cost two extra passes over every layer read. The owner of every
  // handle also keeps the block cache alive (see KeepAlive), which covers
  // an inline value that is pinned in the cache although it is this large
  // (possible only if min_blob_size was lowered since it was written).
  void Unpin(rocksdb::PinnableSlice* v) const;

  absl::Status OpenDbLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);
  void CloseDbLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);

  // RecoverAfterWriteErrorLocked: after a failed write (e.g. disk full),
  // once the disk has room, closes and reopens the database (the WAL replay
  // drops the failed batch) and reloads the index.
  absl::Status RecoverAfterWriteErrorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // MaybeRecoverForRead: while the database is closed (a reopen failed), a
  // read tries the same recovery at most once a second, so the tier comes
  // back without waiting for a write.
  void MaybeRecoverForRead();

  // GetOne: point read of one record; Corruption -> reported miss.
  absl::StatusOr<Blob> GetOne(const ChunkKey& key, const std::string& db_key,
                              const rocksdb::ReadOptions& ro);

  // AddDeleteLocked: header first, then layers and meta (one atomic batch).
  void AddDeleteLocked(rocksdb::WriteBatch* batch, const ChunkKey& key, const Meta& m);

  std::pair<ChunkKey, Meta> PopLruLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveIndexLocked(const ChunkKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SsdTierOptions options_;
  rocksdb::Env* const env_;  // not owned; nullptr = default
  std::unique_ptr<ReadPool> read_pool_;  // null when read_threads <= 1

  // db_mu_: shared by every operation that uses the database, exclusive to
  // open/close/reopen it. Order: write_mu_ -> db_mu_ -> mu_.
  mutable Mutex db_mu_ ABSL_ACQUIRED_AFTER(write_mu_) ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<rocksdb::DB> db_ ABSL_GUARDED_BY(db_mu_);
  std::vector<rocksdb::ColumnFamilyHandle*> handles_ ABSL_GUARDED_BY(db_mu_);
  // block_cache_: the open database's block cache; handles returned by reads
  // keep a reference (see Unpin).
  std::shared_ptr<rocksdb::Cache> block_cache_ ABSL_GUARDED_BY(db_mu_);
  rocksdb::ColumnFamilyHandle* kv_ = nullptr;    // set under db_mu_ (exclusive)
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;  // set under db_mu_ (exclusive)
  rocksdb::ReadOptions read_options_;        // headers, index
  rocksdb::ReadOptions layer_read_options_;  // layer records
  rocksdb::WriteOptions write_options_;

  Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serializes Put/Delete
  bool write_failed_ ABSL_GUARDED_BY(write_mu_) = false;
  // db_up_: open and writable (TierStats::up); false from a failed write
  // until a reopen succeeds.
  std::atomic<bool> db_up_{true};
  std::atomic<int64_t> last_read_recovery_ms_{0};
  std::atomic<bool> db_closed_{true};  // db_ == nullptr, readable without db_mu_
  mutable Mutex mu_;
  absl::flat_hash_map<ChunkKey, Entry> index_ ABSL_GUARDED_BY(mu_);
  std::list<ChunkKey> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;  // stored chunks + streams' reservations
  // streaming_: keys with a live streaming writer.
  absl::flat_hash_map<ChunkKey, Stream> streaming_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_SSD_INTERNAL_SSD_TIER_IMPL_H_
