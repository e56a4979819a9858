// store_source.h: StoreKvSource, a KvSource fed by the TieredStore's
// layer-wise stream.
//
// Open() starts TieredStore::StreamLayers for one chunk on a background
// thread. Verified layers are queued, at most `max_buffered_layers` at a
// time (the stream blocks while the queue is full: bounded memory, and the
// pinned blobs are released as soon as the Blender has copied a layer into
// the fused cache). ReadLayer(l) waits for layer l and decodes it, whatever
// the codec, straight into the fused cache's rows (kvstore::DecodeLayerInto).
// Destroying the source cancels the stream and joins the thread.
//
// Thread safety: one consumer thread calls ReadLayer (KvSource contract);
// the producer thread is internal.
#ifndef RAGKV_BLEND_STORE_SOURCE_H_
#define RAGKV_BLEND_STORE_SOURCE_H_

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/sync.h"
#include "blend/kv_source.h"
#include "kvstore/tiered_store.h"

namespace ragkv::blend {

class StoreKvSource : public KvSource {
 public:
  // Open: starts streaming `key` under fingerprint `fp` from `store` (not
  // owned; must outlive the source) and waits for its header. Returns
  // nullptr on a miss (no tier holds a verified chunk). The record must be
  // of the `expected` context (kvstore::RecordContext): a record computed
  // in another context is refused by name (FailedPrecondition from
  // kvstore::CheckRecordContext), never served in its place. info()
  // carries the header's first_position (0 for a chunk-local record), from
  // which the Blender re-rotates the keys. Errors: those of StreamLayers
  // before the first layer; InvalidArgument for max_buffered_layers < 1.
  static absl::StatusOr<std::unique_ptr<StoreKvSource>> Open(
      kvstore::TieredStore* store, const kvstore::ChunkKey& key, const kvstore::Fingerprint& fp,
      int max_buffered_layers = 2,
      kvstore::RecordContext expected = kvstore::RecordContext::kChunkLocal);
  ~StoreKvSource() override;
  StoreKvSource(const StoreKvSource&) = delete;
  StoreKvSource& operator=(const StoreKvSource&) = delete;

  const ChunkInfo& info() const override { return info_; }
  // ReadLayer: DataLoss (with the store's message) if the stream broke
  // before layer `layer` arrived; FailedPrecondition if called out of order.
  absl::Status ReadLayer(int layer, kernels::TensorView dst_k, kernels::TensorView dst_v) override;

  // tier_index: the tier that served the first layers (known once Open
  // returns a source).
  size_t tier_index() const;
  // bytes_read: layer-record bytes consumed so far.
  uint64_t bytes_read() const;
  // read_seconds: time the stream spent reading the tiers so far (its waits
  // for room in the queue excluded): the tier read latency of this chunk.
  double read_seconds() const;
  // finished: the stream has delivered every layer (or failed).
  bool finished() const;

 private:
  StoreKvSource(int max_buffered_layers) : max_buffered_(max_buffered_layers) {}
  void Produce(kvstore::TieredStore* store, kvstore::ChunkKey key, kvstore::Fingerprint fp,
               kvstore::RecordContext expected);

  const int max_buffered_;
  ChunkInfo info_;
  kvstore::KvChunkHeader header_;
  std::thread producer_;
  int next_layer_ = 0;  // consumer side only

  mutable Mutex mu_;
  bool have_header_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;       // producer finished (ok or not)
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // consumer gone
  bool found_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status stream_status_ ABSL_GUARDED_BY(mu_);
  std::deque<kvstore::LoadedLayer> queue_ ABSL_GUARDED_BY(mu_);
  size_t tier_index_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_read_ ABSL_GUARDED_BY(mu_) = 0;
  double read_s_ ABSL_GUARDED_BY(mu_) = 0;  // stream time so far, waits excluded
  double wait_s_ ABSL_GUARDED_BY(mu_) = 0;  // waits for room in the queue
};

// StoreChunk / EncodeForStore: a ChunkKV encoded as the store's record
// (kvstore/kv_chunk.h) under its content key ChunkKey::Of(fingerprint,
// tokens), ready for TieredStore::Put. kRaw keeps the chunk's dtype; the
// 8-bit codecs quantize (kvstore/kv_chunk.h). A chunk-local record only:
// InvalidArgument for a chunk whose info.first_position is not 0 (those are
// neighbour-aware records: EncodeNeighbourRecord).
struct StoreChunk {
  kvstore::ChunkKey key;
  std::shared_ptr<const kvstore::EncodedChunk> chunk;
};
absl::StatusOr<StoreChunk> EncodeForStore(
    const ChunkKV& chunk, kvstore::Codec codec = kvstore::Codec::kRaw,
    kvstore::Compression compression = kvstore::Compression::kNone);
// EncodeForStoreAs: the same record under another key (prefix blocks are
// keyed by their chain, blend/prefix_source.h).
absl::StatusOr<StoreChunk> EncodeForStoreAs(
    const ChunkKV& chunk, const kvstore::ChunkKey& key, kvstore::Codec codec = kvstore::Codec::kRaw,
    kvstore::Compression compression = kvstore::Compression::kNone);

// NeighbourContext: what a neighbour-aware record is computed after (docs/
// kv_format.md "Neighbour-aware records"): `lead` (the model's BOS when its
// prompts start with one, else empty), then each neighbour chunk's tokens,
// in this order (the nearest last, next to the chunk).
struct NeighbourContext {
  std::vector<int32_t> lead;
  std::vector<std::vector<int32_t>> neighbours;

  // Tokens: lead + every neighbour's tokens, concatenated (the prefill).
  std::vector<int32_t> Tokens() const;
};

// NeighbourKeyOf: the record's key, kvstore::NeighbourChunkKey(fp, lead,
// ChunkKey::Of(fp, neighbour) for each neighbour, tokens).
kvstore::ChunkKey NeighbourKeyOf(const kvstore::Fingerprint& fp, const NeighbourContext& context,
                                 absl::Span<const int32_t> tokens);

// EncodeNeighbourRecord: `chunk` (PrecomputeChunkInContext of
// context.Tokens(), so info.first_position = its length) encoded under
// NeighbourKeyOf (of `key_fp` when given: a salted namespace, kvstore::
// SaltedFingerprint; else the chunk's fingerprint), its header naming the
// context (RecordContext::kNeighbours) and first_position. InvalidArgument
// when info.first_position is not the context's length (the rows were not
// computed in this context).
absl::StatusOr<StoreChunk> EncodeNeighbourRecord(
    const ChunkKV& chunk, const NeighbourContext& context,
    kvstore::Codec codec = kvstore::Codec::kRaw,
    kvstore::Compression compression = kvstore::Compression::kNone,
    const kvstore::Fingerprint* key_fp = nullptr);

// PrecomputeAndStoreWithNeighbours: PrecomputeChunkInContext(model,
// context.Tokens(), tokens) in the model's KV dtype, EncodeNeighbourRecord,
// Put (`key_fp` as for EncodeNeighbourRecord). Returns the bytes stored.
// Errors: those of the three steps (an empty context: InvalidArgument; over
// the model's context: OutOfRange).
absl::StatusOr<uint64_t> PrecomputeAndStoreWithNeighbours(
    const model::Model& model, kvstore::TieredStore* store, const NeighbourContext& context,
    absl::Span<const int32_t> tokens, kvstore::Codec codec = kvstore::Codec::kRaw,
    const kvstore::Fingerprint* key_fp = nullptr);

// ThroughCodec: what a reader of the store gets back for `chunk` stored with
// `codec`: the chunk encoded (EncodeForStore), every layer decoded to f32
// (kvstore::DecodeLayerToF32) and held in the chunk's dtype again (the
// Blender wants the model's; f16 adds 2^-11 relative rounding, far below an
// 8-bit codec's 2^-4). For measuring a codec's error without a store
// (`ragkv bench quality --kv-codecs`). *bytes (optional): the record's size.
absl::StatusOr<ChunkKV> ThroughCodec(const ChunkKV& chunk, kvstore::Codec codec,
                                     uint64_t* bytes = nullptr);

// PrecomputeAndStore: PrecomputeChunk(model, tokens) (the model's KV dtype)
// encoded by EncodeForStore with `codec` and Put in `store` under its
// content key: the record precompute jobs and the sidecar's store-back both
// write (the same bytes under the same key for the same codec, so duplicate
// writes are harmless). `key`: store it under this key instead (a content
// key in a salted namespace, kvstore::SaltedFingerprint). Returns the bytes
// stored. Errors: those of the three steps.
absl::StatusOr<uint64_t> PrecomputeAndStore(const model::Model& model, kvstore::TieredStore* store,
                                            absl::Span<const int32_t> tokens,
                                            kvstore::Codec codec = kvstore::Codec::kRaw,
                                            const kvstore::ChunkKey* key = nullptr);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_STORE_SOURCE_H_
