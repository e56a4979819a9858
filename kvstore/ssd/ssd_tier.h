// ssd_tier.h: L2 -- the persistent SSD tier on RocksDB with BlobDB.
//
// Layout (docs/kvstore.md): column family "kv" holds, per chunk, the header
// blob under key16||'H' and layer i under key16||'L'||be32(i), so a chunk's
// records are adjacent; layer values go to blob files (enable_blob_files,
// min_blob_size). Column family "meta" holds a small record per chunk
// (bytes, layers, fingerprint, insertion sequence) that is scanned on open
// to rebuild the in-memory budget/eviction index without touching blobs.
// A Put is one atomic WriteBatch over both families; with sync_writes (the
// default) it is fsync'ed to the WAL before Put returns, so every
// acknowledged chunk survives kill -9 and power loss.
//
// Budget: capacity_bytes bounds the logical bytes of stored chunks (sum of
// EncodedChunk::TotalBytes()); physical disk use can exceed it transiently
// until compaction and blob GC reclaim deleted data. Eviction is LRU by last
// access in this process (insertion order after a restart).
//
// Errors: a RocksDB Corruption status on read is reported through
// ReportCorruption and returned as a miss; out-of-space writes return
// ResourceExhausted (the batch is atomic: stored chunks stay intact and
// readable). The next Put first asks RocksDB to Resume() and, if it cannot,
// closes and reopens the database and reloads the index. Other I/O failures
// return Internal. Handles returned by ReadChunk never point into RocksDB memory
// (pinned memtable/block-cache values are copied), so they stay valid
// across such a reopen.
//
// Thread safety: all methods are thread-safe.
#ifndef RAGKV_KVSTORE_SSD_SSD_TIER_H_
#define RAGKV_KVSTORE_SSD_SSD_TIER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kvstore/tier.h"

namespace ragkv::kvstore {

struct SsdTierOptions {
  // Directory of the RocksDB database (created if missing). Required.
  std::string path;
  // Logical byte budget (> 0). Default 16 GiB.
  uint64_t capacity_bytes = uint64_t{16} << 30;
  // Largest chunk accepted (TotalBytes). 0 = capacity_bytes. Default 0.
  uint64_t max_chunk_bytes = 0;
  // fsync the WAL on every Put (durable on acknowledgement). Default true.
  // false: a Put survives kill -9 (the WAL is in the OS page cache) but not
  // a power loss.
  bool sync_writes = true;
  // Values at least this large go to blob files. Default 4 KiB.
  uint64_t min_blob_size = 4096;
  // Blob file target size. Default 256 MiB.
  uint64_t blob_file_size = uint64_t{256} << 20;
  // Block cache for SST data (headers, metadata). Default 32 MiB.
  uint64_t block_cache_bytes = uint64_t{32} << 20;
  // Let RocksDB verify its own blob CRC when reading layer records. Default
  // false: each record carries an XXH3-64 that TieredStore verifies anyway,
  // so RocksDB's CRC is a second pass over the same bytes. Header and index
  // reads always keep RocksDB verification.
  bool verify_rocksdb_checksums = false;
  // Read through O_DIRECT (RocksDB use_direct_reads): the device writes into
  // RocksDB's buffer (no page-cache copy, no double caching of what the RAM
  // tier above already holds); every read goes to the device. If the
  // filesystem refuses O_DIRECT (tmpfs before Linux 6.6), CreateSsdTier
  // falls back to buffered reads and logs it. Cold reads of a 64 MiB chunk:
  // 0.58-0.97 of a raw O_DIRECT read of the same disk, 1 or 2 readers
  // (docs/benchmarks.md, "KV store (kvstore)"). Default true.
  bool use_direct_reads = true;
  // read_threads: threads that read the layers of one large chunk (average
  // layer >= 256 KiB) in parallel, one Get per layer: the calling thread plus
  // read_threads-1 threads of a per-tier pool. Overlaps the device read of
  // one layer with RocksDB's copy of another and keeps several requests in
  // flight. 1 = every ReadChunk (kWhole) is one MultiGet on the calling thread.
  // Smaller layers always use one MultiGet. 1..64. Default 4 (device queue
  // depth 4 per reader; see docs/kvstore.md, "SSD read path").
  int read_threads = 4;
  // Name reported in stats. Default "ssd".
  std::string name = "ssd";
};

// CreateSsdTier: opens (or creates) the database at options.path and rebuilds
// the index from the "meta" family. InvalidArgument on bad options, Internal
// if RocksDB cannot open the directory.
absl::StatusOr<std::unique_ptr<Tier>> CreateSsdTier(const SsdTierOptions& options);

}  // namespace ragkv::kvstore

#endif  // RAGKV_KVSTORE_SSD_SSD_TIER_H_
