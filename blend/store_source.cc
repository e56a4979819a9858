#include "blend/store_source.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kernels/convert.h"

namespace ragkv::blend {

absl::StatusOr<std::unique_ptr<StoreKvSource>> StoreKvSource::Open(
    kvstore::TieredStore* store, const kvstore::ChunkKey& key, const kvstore::Fingerprint& fp,
    int max_buffered_layers, kvstore::RecordContext expected) {
  if (store == nullptr) return absl::InvalidArgumentError("StoreKvSource: null store");
  if (max_buffered_layers < 1) {
    return absl::InvalidArgumentError("StoreKvSource: max_buffered_layers must be >= 1");
  }
  std::unique_ptr<StoreKvSource> s(new StoreKvSource(max_buffered_layers));
  StoreKvSource* raw = s.get();
  s->producer_ = std::thread([raw, store, key, fp, expected, rid = CurrentRequestId()] {
    ScopedRequestId scoped(rid);  // the store's log lines name the request
    raw->Produce(store, key, fp, expected);
  });
  MutexLock lock(&s->mu_);
  auto ready = [raw]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(raw->mu_) {
    return raw->have_header_ || raw->done_;
  };
  s->mu_.Await(ready);
  if (s->have_header_) return s;
  if (!s->stream_status_.ok()) return s->stream_status_;
  return std::unique_ptr<StoreKvSource>();  // miss (destructor joins the finished thread)
}

void StoreKvSource::Produce(kvstore::TieredStore* store, kvstore::ChunkKey key,
                            kvstore::Fingerprint fp, kvstore::RecordContext expected) {
  const auto t0 = Clock::now();
  auto callback = [this, t0, expected](const kvstore::KvChunkHeader& header,
                                       kvstore::LoadedLayer layer) -> absl::Status {
    MutexLock lock(&mu_);
    if (!have_header_) {
      // A record of another context is refused before any row is handed out.
      RETURN_IF_ERROR(kvstore::CheckRecordContext(header, expected));
      info_.first_position = header.first_position;
      header_ = header;
      info_.fingerprint = header.fingerprint;
      info_.dtype = header.dtype;
      info_.num_layers = static_cast<int>(header.num_layers);
      info_.kv_heads = static_cast<int>(header.num_kv_heads);
      info_.head_dim = static_cast<int>(header.head_dim);
      info_.num_tokens = header.num_tokens();
      tier_index_ = layer.tier_index;  // known with the first layer, for ServedTiers
      have_header_ = true;
    }
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || static_cast<int>(queue_.size()) < max_buffered_;
    };
    const auto w0 = Clock::now();
    mu_.Await(room);
    wait_s_ += SecondsSince(w0);
    read_s_ = SecondsSince(t0) - wait_s_;
    if (cancelled_) return absl::CancelledError("StoreKvSource: consumer gone");
    bytes_read_ += layer.blob.size();
    queue_.push_back(std::move(layer));
    return absl::OkStatus();
  };
  absl::StatusOr<kvstore::StreamResult> r = store->StreamLayers(key, fp, callback);
  MutexLock lock(&mu_);
  read_s_ = SecondsSince(t0) - wait_s_;
  done_ = true;
  if (!r.ok()) {
    stream_status_ = r.status();
  } else {
    found_ = r->found;
    tier_index_ = r->tier_index;
  }
}

StoreKvSource::~StoreKvSource() {
  {
    MutexLock lock(&mu_);
    cancelled_ = true;
    queue_.clear();
  }
  if (producer_.joinable()) producer_.join();
}

size_t StoreKvSource::tier_index() const {
  MutexLock lock(&mu_);
  return tier_index_;
}

bool StoreKvSource::finished() const {
  MutexLock lock(&mu_);
  return done_;
}

double StoreKvSource::read_seconds() const {
  MutexLock lock(&mu_);
  return read_s_;
}

uint64_t StoreKvSource::bytes_read() const {
  MutexLock lock(&mu_);
  return bytes_read_;
}

absl::Status StoreKvSource::ReadLayer(int layer, kernels::TensorView dst_k,
                                      kernels::TensorView dst_v) {
  if (layer != next_layer_) {
    return absl::FailedPreconditionError(absl::StrCat("StoreKvSource: layer ", layer,
                                                      " requested, expected ", next_layer_));
  }
  kvstore::LoadedLayer loaded;
  {
    MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !queue_.empty() || done_;
    };
    mu_.Await(ready);
    if (queue_.empty()) {
      return stream_status_.ok()
                 ? absl::DataLossError(absl::StrCat("StoreKvSource: stream ended before layer ",
                                                    layer))
                 : stream_status_;
    }
    loaded = std::move(queue_.front());
    queue_.pop_front();
  }
  if (static_cast<int>(loaded.layer) != layer) {
    return absl::DataLossError(
        absl::StrCat("StoreKvSource: got layer ", loaded.layer, ", expected ", layer));
  }
  ++next_layer_;
  // Decoded straight into the fused cache's rows, whatever the codec.
  return kvstore::DecodeLayerInto(header_, loaded.blob.view(), loaded.layer, dst_k, dst_v);
}

namespace {

// Encode: `chunk` as a record under `key`, its header naming `context` and
// the chunk's first position.
absl::StatusOr<StoreChunk> Encode(const ChunkKV& chunk, const kvstore::ChunkKey& key,
                                  kvstore::RecordContext context, kvstore::Codec codec,
                                  kvstore::Compression compression) {
  if (chunk.info.first_position < 0 || chunk.info.first_position > kvstore::kMaxTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeForStore: first position ", chunk.info.first_position));
  }
  kvstore::KvChunkHeader h;
  h.context = context;
  h.first_position = static_cast<uint32_t>(chunk.info.first_position);
  h.fingerprint = chunk.info.fingerprint;
  h.key = key;
  h.dtype = chunk.info.dtype;
  h.codec = codec;
  h.compression = compression;
  h.num_layers = static_cast<uint32_t>(chunk.info.num_layers);
  h.num_kv_heads = static_cast<uint32_t>(chunk.info.kv_heads);
  h.head_dim = static_cast<uint32_t>(chunk.info.head_dim);
  h.tokens = chunk.tokens;
  std::vector<kernels::TensorView> ks, vs;
  for (int l = 0; l < chunk.info.num_layers; ++l) {
    ks.push_back(chunk.LayerK(l));
    vs.push_back(chunk.LayerV(l));
  }
  ASSIGN_OR_RETURN(kvstore::EncodedChunk enc, kvstore::EncodeChunk(&h, ks, vs));
  StoreChunk out;
  out.key = h.key;
  out.chunk = std::make_shared<const kvstore::EncodedChunk>(std::move(enc));
  return out;
}

kvstore::RecordContext ContextOf(const ChunkKV& chunk) {
  return chunk.info.first_position == 0 ? kvstore::RecordContext::kChunkLocal
                                        : kvstore::RecordContext::kNeighbours;
}

}  // namespace

absl::StatusOr<StoreChunk> EncodeForStore(const ChunkKV& chunk, kvstore::Codec codec,
                                          kvstore::Compression compression) {
  return EncodeForStoreAs(chunk, kvstore::ChunkKey::Of(chunk.info.fingerprint, chunk.tokens),
                          codec, compression);
}

absl::StatusOr<StoreChunk> EncodeForStoreAs(const ChunkKV& chunk, const kvstore::ChunkKey& key,
                                            kvstore::Codec codec,
                                            kvstore::Compression compression) {
  if (chunk.info.first_position != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EncodeForStore: the chunk's rows start at position ", chunk.info.first_position,
        " of another context; only EncodeNeighbourRecord stores those (under their own key)"));
  }
  return Encode(chunk, key, kvstore::RecordContext::kChunkLocal, codec, compression);
}

std::vector<int32_t> NeighbourContext::Tokens() const {
  std::vector<int32_t> out = lead;
  for (const auto& n : neighbours) out.insert(out.end(), n.begin(), n.end());
  return out;
}

kvstore::ChunkKey NeighbourKeyOf(const kvstore::Fingerprint& fp, const NeighbourContext& context,
                                 absl::Span<const int32_t> tokens) {
  std::vector<kvstore::ChunkKey> keys;
  keys.reserve(context.neighbours.size());
  for (const auto& n : context.neighbours) keys.push_back(kvstore::ChunkKey::Of(fp, n));
  return kvstore::NeighbourChunkKey(fp, context.lead, keys, tokens);
}

absl::StatusOr<StoreChunk> EncodeNeighbourRecord(const ChunkKV& chunk,
                                                 const NeighbourContext& context,
                                                 kvstore::Codec codec,
                                                 kvstore::Compression compression,
                                                 const kvstore::Fingerprint* key_fp) {
  const int64_t P = static_cast<int64_t>(context.Tokens().size());
  if (P == 0 || chunk.info.first_position != P) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EncodeNeighbourRecord: the rows start at position ", chunk.info.first_position,
        ", the context holds ", P, " tokens (want the chunk computed right after it, P > 0)"));
  }
  const kvstore::Fingerprint& fp = key_fp != nullptr ? *key_fp : chunk.info.fingerprint;
  return Encode(chunk, NeighbourKeyOf(fp, context, chunk.tokens),
                kvstore::RecordContext::kNeighbours, codec, compression);
}

absl::StatusOr<uint64_t> PrecomputeAndStoreWithNeighbours(
    const model::Model& model, kvstore::TieredStore* store, const NeighbourContext& context,
    absl::Span<const int32_t> tokens, kvstore::Codec codec, const kvstore::Fingerprint* key_fp) {
  ASSIGN_OR_RETURN(ChunkKV kv, PrecomputeChunkInContext(model, context.Tokens(), tokens,
                                                        model.config().kv_dtype));
  ASSIGN_OR_RETURN(StoreChunk enc,
                   EncodeNeighbourRecord(kv, context, codec, kvstore::Compression::kNone, key_fp));
  const uint64_t bytes = enc.chunk->TotalBytes();
  RETURN_IF_ERROR(store->Put(enc.key, enc.chunk));
  return bytes;
}

absl::StatusOr<ChunkKV> ThroughCodec(const ChunkKV& chunk, kvstore::Codec codec,
                                     uint64_t* bytes) {
  ASSIGN_OR_RETURN(StoreChunk enc,
                   Encode(chunk, kvstore::ChunkKey::Of(chunk.info.fingerprint, chunk.tokens),
                          ContextOf(chunk), codec, kvstore::Compression::kNone));
  ASSIGN_OR_RETURN(kvstore::KvChunkHeader h, kvstore::DecodeHeader(enc.chunk->header));
  if (bytes != nullptr) *bytes = enc.chunk->TotalBytes();
  ChunkKV out;
  out.info = chunk.info;
  out.tokens = chunk.tokens;
  const int64_t n = static_cast<int64_t>(h.LayerElements());
  std::vector<float> k(n), v(n);
  for (uint32_t l = 0; l < h.num_layers; ++l) {
    RETURN_IF_ERROR(kvstore::DecodeLayerToF32(h, enc.chunk->layers[l], l, k.data(), v.data()));
    for (auto [src, dst] : {std::pair{&k, &out.k}, std::pair{&v, &out.v}}) {
      dst->emplace_back(static_cast<size_t>(n) * kernels::DTypeSize(chunk.info.dtype));
      RETURN_IF_ERROR(kernels::Convert(
          kernels::TensorView::Contiguous(src->data(), kernels::DType::kF32, {n}),
          kernels::TensorView::Contiguous(dst->back().data(), chunk.info.dtype, {n})));
    }
  }
  return out;
}

absl::StatusOr<uint64_t> PrecomputeAndStore(const model::Model& model, kvstore::TieredStore* store,
                                            absl::Span<const int32_t> tokens,
                                            kvstore::Codec codec, const kvstore::ChunkKey* key) {
  ASSIGN_OR_RETURN(ChunkKV kv, PrecomputeChunk(model, tokens));
  ASSIGN_OR_RETURN(StoreChunk enc, key != nullptr ? EncodeForStoreAs(kv, *key, codec)
                                                   : EncodeForStore(kv, codec));
  const uint64_t bytes = enc.chunk->TotalBytes();
  RETURN_IF_ERROR(store->Put(enc.key, enc.chunk));
  return bytes;
}

}  // namespace ragkv::blend
