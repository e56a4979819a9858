// tiered_store.h: TieredStore -- the KV store the rest of ragkv talks to.
//
// An ordered list of tiers, fastest first (typically RAM, SSD, Redis; any
// Tier list works). Lookups cascade down the list; the first tier holding a
// verified chunk serves it and, by default, the chunk is promoted into every
// faster tier. Writes go through a policy:
//  * kWriteThrough: Put writes every tier before returning.
//  * kWriteBack: Put writes tier 0 synchronously and queues the lower tiers
//    on a bounded queue drained by one background thread; Put blocks while
//    the queue is full (backpressure, never silent drops). Flush() waits for
//    the queue to drain.
//
// Verification (tier.h contract): every blob read from any tier is checked
// before it is served or promoted: header checksum and format, header key ==
// requested key, header fingerprint == requested fingerprint, each layer's
// checksum and binding to the header digest. A corrupt blob is reported to
// its tier (ReportCorruption: counted, logged, deleted) and the lookup
// continues with the next tier. A fingerprint mismatch is a miss (counted in
// StoreStats::fingerprint_mismatches), never a wrong answer. A tier error
// (Status) is counted in that tier's stats and degrades to a miss in that
// tier; the store keeps serving from the others.
//
// Thread safety: all methods are thread-safe. ChunkHandle and the
// LayerCallback arguments are owned by the caller / valid for the call only,
// as documented below.
#ifndef RAGKV_KVSTORE_TIERED_STORE_H_
#define RAGKV_KVSTORE_TIERED_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvstore/chunk_key.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/tier.h"

namespace ragkv::kvstore {

enum class WritePolicy { kWriteThrough = 0, kWriteBack = 1 };

struct TieredStoreOptions {
  // Write policy. Default write-through.
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  // kWriteBack: queue bound in chunks and in bytes (a Put blocks while
  // either would be exceeded; a single chunk larger than the byte bound is
  // admitted alone). Defaults 64 chunks / 1 GiB.
  size_t write_back_max_chunks = 64;
  uint64_t write_back_max_bytes = uint64_t{1} << 30;
  // Copy a chunk found in tier i into tiers 0..i-1. Default true.
  bool promote_on_hit = true;
  // Verify every layer record's checksum in Put before storing. Default true.
  bool verify_on_put = true;
  // best_effort_tiers: the last N tiers (never tier 0) are best-effort for
  // writes: when one of them fails a Put that a tier above it accepted, the
  // failure is logged and counted (the tier's errors and
  // StoreStats::tier_errors) but Put still returns OK. For a shared remote
  // tier (Redis) whose outage must not fail writes that are already stored
  // locally. Default 0: a write-through Put is OK iff every tier accepted it.
  size_t best_effort_tiers = 0;
};

// LoadedLayer: one verified layer as delivered to a reader. The blob is
// pinned (zero-copy from the RAM tier) for as long as the LoadedLayer lives.
struct LoadedLayer {
  uint32_t layer = 0;
  PinnedBytes blob;       // the layer record (kv_chunk.h format)
  size_t tier_index = 0;  // the tier that served this layer

  // DecodeToF32: K and V as f32 [kv_heads][tokens][head_dim] each
  // (header.LayerElements() floats per output).
  absl::Status DecodeToF32(const KvChunkHeader& header, float* k_out, float* v_out) const {
    return DecodeLayerToF32(header, blob.view(), layer, k_out, v_out);
  }
  // RawViews: zero-copy K/V views (codec raw, no compression only), valid
  // while this LoadedLayer lives.
  absl::StatusOr<RawLayer> RawViews(const KvChunkHeader& header) const {
    return RawLayerViews(header, blob.view(), layer);
  }
};

// ChunkHandle: a whole verified chunk, pinned. Move-only.
struct ChunkHandle {
  KvChunkHeader header;
  std::vector<LoadedLayer> layers;  // layers[i].layer == i
  size_t tier_index = 0;            // the tier that served it
};

// StreamResult: outcome of StreamLayers.
struct StreamResult {
  bool found = false;           // false: a miss, the callback was never called
  uint32_t layers_delivered = 0;
  size_t tier_index = 0;        // the tier that served the (first) layers
};

// StoreStats: store-level counters (per-tier counters are in TierStats).
struct StoreStats {
  uint64_t lookups = 0;                 // Get/StreamLayers/MultiGet keys
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t fingerprint_mismatches = 0;
  uint64_t corrupt_records = 0;         // blobs that failed verification
  uint64_t tier_errors = 0;             // tier Status errors degraded to misses
  uint64_t promotions = 0;              // chunk copies into faster tiers
  uint64_t write_back_queued = 0;       // chunks currently queued
  uint64_t write_back_failures = 0;     // background writes that failed
  std::vector<uint64_t> hits_by_tier;   // hits served by tier i
};

class TieredStore {
 public:
  // LayerCallback: receives layer i (in order 0..L-1) as soon as it has been
  // read and verified. `header` and `layer` are valid for the call only (move
  // layer.blob out to keep it pinned). A non-OK return aborts the stream and
  // is returned by StreamLayers.
  using LayerCallback = std::function<absl::Status(const KvChunkHeader& header, LoadedLayer layer)>;

  // Create: `tiers` fastest first, at least one, no nulls. InvalidArgument
  // otherwise.
  static absl::StatusOr<std::unique_ptr<TieredStore>> Create(
      const TieredStoreOptions& options, std::vector<std::shared_ptr<Tier>> tiers);

  // ~TieredStore: drains the write-back queue (as Flush), then stops.
  ~TieredStore();
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  // Put: stores `chunk` under `key` per the write policy. The chunk is
  // checked first (header decodes, header key == key, layer count, and with
  // verify_on_put every layer record): InvalidArgument/DataLoss on malformed
  // input, nothing is written. Write-through: OK iff every tier accepted it
  // (best-effort tiers excepted, see the option); otherwise the first failure
  // (tiers that accepted keep the valid chunk).
  // Write-back: OK once tier 0 holds the chunk and the lower tiers' write is
  // queued (blocking while the queue is full); if tier 0 rejects it (e.g.
  // too large for RAM), the lower tiers are written synchronously and their
  // first failure, if any, is returned.
  absl::Status Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk);

  // BeginPut: Put layer by layer, for a chunk that arrives that way (the
  // PutChunk stream): `header` is the encoded header blob, `total_bytes` the
  // chunk's TotalBytes (each tier checks its limits up front). Write-through:
  // every tier's writer receives each layer as it is added (the SSD tier
  // writes it at once; RAM and Redis gather it), each record verified first
  // with verify_on_put; a required tier's failure fails the write at once,
  // and destroying the writer then aborts it in every tier; Commit commits
  // tier by tier with Put's rules. A chunk is visible in a tier only from
  // its Commit. Write-back: the chunk is gathered and Put at Commit.
  absl::StatusOr<std::unique_ptr<ChunkWriter>> BeginPut(const ChunkKey& key, std::string header,
                                                         uint64_t total_bytes);

  // Get: the whole chunk, or std::nullopt on a miss (see class comment).
  // Errors are returned only for invalid calls; tier failures are misses.
  absl::StatusOr<std::optional<ChunkHandle>> Get(const ChunkKey& key, const Fingerprint& fp);

  // MultiGet: Get for each of many keys. Result i is for keys[i].
  std::vector<std::optional<ChunkHandle>> MultiGet(absl::Span<const ChunkKey> keys,
                                                   const Fingerprint& fp);

  // StreamLayers: layer-wise read. Finds the first tier with a valid header,
  // then reads, verifies and delivers layers 0..L-1 one at a time, so the
  // consumer can overlap loading with compute. If a layer is missing or
  // corrupt mid-stream, the stream continues from the next tier holding a
  // chunk with the same header digest; if none, returns DataLoss with the
  // number of layers already delivered in the message (the consumer must
  // recompute). A miss before any layer is StreamResult{found=false}.
  absl::StatusOr<StreamResult> StreamLayers(const ChunkKey& key, const Fingerprint& fp,
                                            const LayerCallback& callback);

  // Contains: whether any tier has a header for `key`, without reading data
  // (no fingerprint check). Locate: the index of the first such tier.
  bool Contains(const ChunkKey& key);
  std::optional<size_t> Locate(const ChunkKey& key);

  // Delete / DeleteByFingerprint: remove from every tier (and from the
  // write-back queue). Returns the first tier error, after trying all tiers.
  // DeleteByFingerprint returns the number of chunks removed, summed over
  // tiers (a chunk present in two tiers counts twice).
  absl::Status Delete(const ChunkKey& key);
  absl::StatusOr<uint64_t> DeleteByFingerprint(const Fingerprint& fp);

  // Flush: waits until the write-back queue is empty, then flushes tiers.
  absl::Status Flush();

  // Stats: store counters / per-tier snapshots (index i = tiers[i]).
  StoreStats Stats() const;
  std::vector<TierStats> TierStatsAll() const;

  size_t num_tiers() const;
  Tier& tier(size_t i);

 private:
  class Impl;
  explicit TieredStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ragkv::kvstore

#endif  // RAGKV_KVSTORE_TIERED_STORE_H_
