// tier.h: the abstract storage tier (RAM, SSD/RocksDB, Redis) behind
// TieredStore, the pinned read handle, and per-tier statistics.
//
// CONTRACT FOR TIER IMPLEMENTERS
//  * What is stored per key: exactly the blobs of one EncodedChunk
//    (kv_chunk.h): the header blob and num_layers layer-record blobs. A tier
//    treats them as opaque bytes and must return them byte-identical. A tier
//    may keep each blob under its own storage key (remote tiers should: the
//    Redis tier stores "<prefix>:{<keyhex>}:h" and "<prefix>:{<keyhex>}:L<i>",
//    the hash tag keeping a chunk in one cluster slot; the SSD tier
//    key16||'H' and key16||'L'||be32(i)), or concatenate them; either way
//    ReadChunk delivers record i alone as layer i.
//  * Atomicity: Put (and a BeginPut writer's Commit) must make a chunk
//    visible all-or-nothing to ReadChunk:
//    write the layers first and the header last (the header is the commit
//    marker), or use an atomic batch. Delete removes the header first.
//    Re-putting an existing key replaces it (a reader that already read the
//    old header may then find layers bound to another header; the store
//    detects this through the header digest and treats it as a miss).
//  * Checksums: tiers are NOT required to verify anything. TieredStore
//    verifies every blob it reads from any tier (header checksum, layer
//    checksum, binding of each layer to the header digest, requested key and
//    fingerprint) before serving or promoting it. On a failure it calls
//    ReportCorruption(key, detail) on the tier that returned the bytes and
//    treats the lookup as a miss; it never serves the bytes. A tier MAY verify
//    earlier itself (kv_chunk.h DecodeHeader / ParseLayerRecord); if it finds
//    corruption it calls ReportCorruption and treats the blob as absent.
//  * A layer that is absent although its header was found is a miss in that
//    tier (a concurrent eviction/replacement), not corruption. A tier whose
//    medium can lose layers on its own (e.g. Redis maxmemory eviction)
//    should delete such orphaned headers itself.
//  * Misses are absences (no OnHeader call; a std::nullopt layer), not
//    errors. An error Status means the tier
//    failed (Unavailable: unreachable; Internal/DataLoss: I/O failure;
//    ResourceExhausted: full or value too large even after eviction;
//    InvalidArgument: malformed request). TieredStore counts a tier error,
//    degrades it to a miss and keeps serving from the other tiers.
//  * Stats: implementations count a hit or a miss per ReadChunk, bytes read
//    by ReadChunk, bytes written by Put and BeginPut writers, evictions,
//    errors, and the wall time spent in reads/writes, through
//    counters() (atomic; TierCounters below). Stats() snapshots them.
//  * Thread safety: every method may be called concurrently from many
//    threads. PinnedBytes handles may outlive any later Delete/eviction/Put of
//    the same key: they keep their bytes alive until destroyed.
#ifndef RAGKV_KVSTORE_TIER_H_
#define RAGKV_KVSTORE_TIER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvstore/chunk_key.h"
#include "kvstore/kv_chunk.h"

namespace ragkv::kvstore {

// PinnedBytes: a move-only read handle: a view of bytes plus an opaque owner
// that keeps them alive (a RAM-tier entry, a rocksdb::PinnableSlice, a redis
// reply, or a std::string). Zero-copy while pinned: the view is valid until
// the handle is destroyed or moved from, regardless of evictions.
class PinnedBytes {
 public:
  PinnedBytes() = default;
  // PinnedBytes(view, owner): `owner` must keep `view`'s memory alive.
  PinnedBytes(std::string_view view, std::shared_ptr<const void> owner)
      : view_(view), owner_(std::move(owner)) {}
  // FromString: takes ownership of `s` (one move, no copy of the bytes).
  static PinnedBytes FromString(std::string s);

  PinnedBytes(PinnedBytes&& other) noexcept
      : view_(std::exchange(other.view_, {})), owner_(std::move(other.owner_)) {}
  PinnedBytes& operator=(PinnedBytes&& other) noexcept {
    view_ = std::exchange(other.view_, {});
    owner_ = std::move(other.owner_);
    return *this;
  }
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;

  std::string_view view() const { return view_; }
  const char* data() const { return view_.data(); }
  size_t size() const { return view_.size(); }

 private:
  std::string_view view_;
  std::shared_ptr<const void> owner_;
};

// TierStats: a snapshot of one tier's counters (cumulative since creation).
struct TierStats {
  std::string name;
  uint64_t hits = 0;             // ReadChunk found the key's header
  uint64_t misses = 0;           // ReadChunk did not
  uint64_t bytes_read = 0;       // header + layer bytes returned by ReadChunk
  uint64_t bytes_written = 0;    // bytes accepted by Put
  uint64_t puts = 0;
  uint64_t deletes = 0;          // keys removed by Delete/DeleteByFingerprint
  uint64_t evictions = 0;        // chunks evicted to stay within budget
  uint64_t errors = 0;           // failed operations (tier-side failures)
  uint64_t corrupt_records = 0;  // checksum/format failures reported
  double read_seconds = 0;       // wall time inside ReadChunk calls
  double write_seconds = 0;      // wall time inside Put calls
  uint64_t bytes_used = 0;       // current occupancy (0 if unknown)
  uint64_t capacity_bytes = 0;   // byte budget (0 = unbounded / unknown)
  uint64_t entries = 0;          // current chunk count (0 if unknown)
  // up: 1 while the tier's medium is reachable, 0 after a round trip failed
  // to reach it (remote tiers: connection refused/reset, timeout) until one
  // succeeds again; the SSD tier: 0 while it cannot write (disk full, a
  // failed reopen) until a write succeeds again. The RAM tier is always 1.
  uint64_t up = 1;
  // outages: how many times `up` went from 1 to 0 (remote tiers; else 0).
  uint64_t outages = 0;
  // quarantined: damaged databases moved aside at open (SSD tier).
  uint64_t quarantined = 0;

  double ReadGBps() const { return read_seconds > 0 ? bytes_read / read_seconds / 1e9 : 0; }
  double WriteGBps() const { return write_seconds > 0 ? bytes_written / write_seconds / 1e9 : 0; }
  std::string DebugString() const;
};

// TierCounters: the atomic counters behind TierStats (relaxed ordering).
struct TierCounters {
  std::atomic<uint64_t> hits{0}, misses{0}, bytes_read{0}, bytes_written{0}, puts{0},
      deletes{0}, evictions{0}, errors{0}, corrupt_records{0}, quarantined{0};
  std::atomic<uint64_t> read_ns{0}, write_ns{0};
  // Snapshot: copies the counters into a TierStats (occupancy fields zero).
  TierStats Snapshot(std::string_view name) const;
};

// ScopedTimerNs: adds the elapsed wall nanoseconds to `sink` on destruction.
class ScopedTimerNs {
 public:
  explicit ScopedTimerNs(std::atomic<uint64_t>* sink);
  ~ScopedTimerNs();
  ScopedTimerNs(const ScopedTimerNs&) = delete;
  ScopedTimerNs& operator=(const ScopedTimerNs&) = delete;

 private:
  std::atomic<uint64_t>* sink_;
  int64_t start_ns_;
};

// ReadMode: how the reader of Tier::ReadChunk will take the layers, so that
// the tier can plan its I/O. The layers delivered are always the ones
// ChunkReader::OnHeader asks for; the mode only says what to fetch ahead.
enum class ReadMode {
  kHeaderOnly,  // the header alone: fetch no layer ahead (OnHeader asks none)
  kWhole,       // all requested layers: the tier may fetch them all (one
                // RocksDB MultiGet, one Redis pipeline) before the first
  kStream,      // each layer as early as possible: the tier may read them
                // one by one (or in growing batches) as the reader takes them
};

// LayerRange: the layers [first, first + count) a reader asks for.
struct LayerRange {
  uint32_t first = 0;
  uint32_t count = 0;
};

// ChunkReader: the receiving side of Tier::ReadChunk (implemented by
// TieredStore and Tier::GetHeader). Called on the thread that called
// ReadChunk.
class ChunkReader {
 public:
  virtual ~ChunkReader() = default;
  // OnHeader: the chunk's header blob. Returns the layers to deliver next,
  // normally {0, num_layers} once the header has been verified; an empty
  // range stops the read (a corrupt header, a wrong fingerprint, a header-
  // only read). A reader that resumes a chunk another tier began asks for
  // {k, num_layers - k}.
  virtual LayerRange OnHeader(PinnedBytes header) = 0;
  // OnLayer: layer `layer`'s record, in order first, first + 1, ...;
  // std::nullopt if the tier has no such layer (then no further layer
  // follows). Returns false to stop the read.
  virtual bool OnLayer(uint32_t layer, std::optional<PinnedBytes> blob) = 0;
};

// ChunkWriter: one chunk written layer by layer (Tier::BeginPut,
// TieredStore::BeginPut). Layers arrive in order 0..L-1; Commit writes the
// header, the commit marker, and only then is the chunk visible. A writer
// destroyed before Commit (or after a failed one) is aborted: what it wrote
// is removed, and a process killed mid-write leaves nothing a reader can
// see (the tier reclaims the orphaned layers on its own; docs/kvstore.md).
// Not thread-safe: one caller drives one writer.
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  // AddLayer: the next layer's record (kv_chunk.h format), copied or
  // written before the call returns.
  virtual absl::Status AddLayer(std::string_view record) = 0;
  // Commit: after the last layer; FailedPrecondition if layers are missing.
  virtual absl::Status Commit() = 0;
};

// NewBufferingWriter: a ChunkWriter that gathers the chunk in memory and
// hands it whole to `commit` (a tier's or the store's Put) at Commit.
std::unique_ptr<ChunkWriter> NewBufferingWriter(
    std::string header, uint32_t num_layers,
    std::function<absl::Status(std::shared_ptr<const EncodedChunk>)> commit);

// TierKind: what medium a tier is, for consumers that price or plan by it
// (the cost model's tier, blend::Tier); kOther for anything else (wrappers
// in tests, future tiers), which such consumers treat as unknown.
enum class TierKind { kRam, kSsd, kRemote, kOther };

// Tier: one storage level. See the contract at the top of this file.
//
// The interface is deliberately narrow: one read (ReadChunk, which a tier
// batches as its medium allows), one presence probe (Contains), a whole-
// chunk write (Put) and, for a tier that writes layers as they arrive, a
// layer-wise one (BeginPut). GetHeader is a convenience over ReadChunk.
class Tier {
 public:
  using Blob = std::optional<PinnedBytes>;

  virtual ~Tier() = default;

  // Name: short stable name for stats and logs ("ram", "ssd", "redis").
  virtual std::string_view Name() const = 0;
  // Kind: the tier's medium (names are configurable; the kind is not).
  virtual TierKind Kind() const { return TierKind::kOther; }

  // ReadChunk: reads chunk `key` into `reader`: OnHeader once (not at all
  // on a miss), then OnLayer for the layers OnHeader asked for, in order,
  // until the reader stops or a layer is absent. Counts a hit or a miss (the
  // header's presence), bytes read and the read time. `mode` says how the
  // reader takes the layers (ReadMode): a tier may fetch header and layers
  // together (the Redis tier sends one pipeline for the whole chunk unless
  // kHeaderOnly), all layers at once (kWhole: one RocksDB MultiGet) or one
  // by one (kStream). An error Status means the tier failed, possibly after
  // some layers were delivered. Implementations must not hold locks or
  // pooled connections while calling `reader`: a reader may block (stream
  // backpressure) or call back into this tier (ReportCorruption).
  virtual absl::Status ReadChunk(const ChunkKey& key, ChunkReader& reader, ReadMode mode) = 0;

  // GetHeader: the header blob of `key`, std::nullopt on a miss
  // (ReadChunk with kHeaderOnly: counts a hit or a miss).
  absl::StatusOr<Blob> GetHeader(const ChunkKey& key);

  // Contains: whether a header for `key` is present, without reading it or
  // counting a hit or miss (the answer may be stale immediately under
  // concurrency).
  virtual absl::StatusOr<bool> Contains(const ChunkKey& key) = 0;

  // Put: stores the chunk under `key` (replacing any previous one). The tier
  // may keep `chunk` (shared, immutable) instead of copying it (the RAM
  // tier does). Errors: ResourceExhausted if it cannot fit (the tier's
  // previous content is intact), InvalidArgument for malformed chunks,
  // Unavailable/Internal on failure.
  virtual absl::Status Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) = 0;

  // BeginPut: starts a layer-wise Put of the chunk whose header blob is
  // `header` and whose TotalBytes is `total_bytes`. First checks that such a
  // chunk can fit at all (above the tier's per-chunk or total limit:
  // ResourceExhausted, nothing written). Then returns either a writer that
  // writes each layer as it arrives (the SSD tier; same errors and
  // replacement rule as Put), or nullptr: the tier takes the chunk whole,
  // and the caller gathers it and calls Put after the last layer
  // (TieredStore gathers one copy for all such tiers). Default: nullptr,
  // no limit.
  virtual absl::StatusOr<std::unique_ptr<ChunkWriter>> BeginPut(const ChunkKey& key,
                                                                 std::string header,
                                                                 uint64_t total_bytes);

  // Delete: removes `key` (header first). OK if absent.
  virtual absl::Status Delete(const ChunkKey& key) = 0;

  // DeleteByFingerprint: removes every chunk whose header carries `fp`
  // (kHeaderFingerprintOffset; by scan or a secondary index). Returns the
  // number of chunks removed.
  virtual absl::StatusOr<uint64_t> DeleteByFingerprint(const Fingerprint& fp) = 0;

  // Flush: makes every acknowledged Put durable where the tier is persistent.
  virtual absl::Status Flush() { return absl::OkStatus(); }

  // Stats: snapshot of the counters; implementations add occupancy.
  virtual TierStats Stats() const;

  // ReportCorruption: called (by TieredStore or the tier itself) when bytes
  // this tier returned for `key` failed verification: counts
  // corrupt_records, logs a WARNING with `detail`, and deletes the key so it
  // is not served again.
  void ReportCorruption(const ChunkKey& key, std::string_view detail);

  // counters: the live counters (for implementations and TieredStore).
  TierCounters& counters() { return counters_; }
  const TierCounters& counters() const { return counters_; }

 private:
  TierCounters counters_;
};

}  // namespace ragkv::kvstore

#endif  // RAGKV_KVSTORE_TIER_H_
