#include "services/kvstore_service.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "services/internal/grpc_util.h"
#include "services/internal/kv_wire.h"

namespace ragkv::services {
namespace {

using internal::RunUnary;

constexpr int kMaxKeysPerCall = 4096;

absl::Status NeedStore(const ServiceContext* ctx) {
  if (ctx->store == nullptr) return absl::FailedPreconditionError("this server has no KV store");
  return absl::OkStatus();
}

absl::StatusOr<kvstore::ChunkKey> ParseKey(const std::string& raw) {
  auto k = kvstore::ChunkKey::FromBytes(raw);
  if (!k.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chunk key must be 16 bytes, got %d", raw.size()));
  }
  return *k;
}

template <typename Keys>
absl::Status CheckKeyCount(const Keys& keys) {
  if (keys.size() > kMaxKeysPerCall) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d keys in one call (max %d)", keys.size(), kMaxKeysPerCall));
  }
  return absl::OkStatus();
}

// ResolveFingerprint: the request's, else the served model's, else the one
// stored in the fastest tier's header of `key` (nullopt: not stored).
absl::StatusOr<std::optional<kvstore::Fingerprint>> ResolveFingerprint(
    const ServiceContext* ctx, const kvstore::ChunkKey& key, const std::string& requested) {
  if (!requested.empty()) {
    ASSIGN_OR_RETURN(auto fp, internal::FingerprintFromBytes(requested));
    return std::optional<kvstore::Fingerprint>(fp);
  }
  if (ctx->model != nullptr) return std::optional<kvstore::Fingerprint>(ctx->model->fingerprint());
  std::optional<size_t> tier = ctx->store->Locate(key);
  if (!tier) return std::optional<kvstore::Fingerprint>();
  ASSIGN_OR_RETURN(auto blob, ctx->store->tier(*tier).GetHeader(key));
  if (!blob) return std::optional<kvstore::Fingerprint>();
  ASSIGN_OR_RETURN(auto fp, kvstore::PeekFingerprint(blob->view()));
  return std::optional<kvstore::Fingerprint>(fp);
}

// PutState: a chunk being received by PutChunk.
struct PutState {
  bool have_header = false;
  v1::KVHeader header;
  std::vector<v1::LayerKV> layers;
  size_t layer_bytes = 0;
};

}  // namespace

grpc::ServerUnaryReactor* KVStoreServiceImpl::Lookup(grpc::CallbackServerContext* c,
                                                     const v1::LookupRequest* req,
                                                     v1::LookupResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedStore(ctx_));
    RETURN_IF_ERROR(CheckKeyCount(req->keys()));
    for (const std::string& raw : req->keys()) {
      ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseKey(raw));
      v1::LookupResult* r = resp->add_results();
      r->set_key(raw);
      std::optional<size_t> tier = ctx_->store->Locate(key);
      if (!tier) continue;
      kvstore::Tier& t = ctx_->store->tier(*tier);
      auto blob = t.GetHeader(key);
      if (!blob.ok() || !blob->has_value()) continue;  // raced with a delete / tier error
      auto h = kvstore::DecodeHeader((*blob)->view());
      if (!h.ok()) continue;  // corrupt: a miss (the store reports it on read)
      r->set_found(true);
      r->set_tier(std::string(t.Name()));
      r->set_num_tokens(h->num_tokens());
      r->set_bytes((*blob)->size() + h->num_layers * (kvstore::kLayerPrefixBytes +
                                                      h->RawPayloadBytes()));
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KVStoreServiceImpl::Contains(grpc::CallbackServerContext* c,
                                                       const v1::ContainsRequest* req,
                                                       v1::ContainsResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedStore(ctx_));
    RETURN_IF_ERROR(CheckKeyCount(req->keys()));
    for (const std::string& raw : req->keys()) {
      ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseKey(raw));
      resp->add_present(ctx_->store->Contains(key));
    }
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::KVRecord>* KVStoreServiceImpl::GetChunk(
    grpc::CallbackServerContext* c, const v1::GetChunkRequest* req) {
  return internal::StartStream<v1::KVRecord>(
      c, ctx_->executor, ctx_->gate,
      [this, req](internal::StreamWriter<v1::KVRecord>* w) -> absl::Status {
        RETURN_IF_ERROR(NeedStore(ctx_));
        ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseKey(req->key()));
        ASSIGN_OR_RETURN(auto fp, ResolveFingerprint(ctx_, key, req->model_fingerprint()));
        if (!fp) return absl::NotFoundError("chunk " + key.ToHex() + " is not stored");
        bool header_sent = false;
        bool client_gone = false;
        uint64_t bytes = 0;
        auto result = ctx_->store->StreamLayers(
            key, *fp,
            [&](const kvstore::KvChunkHeader& h, kvstore::LoadedLayer layer) -> absl::Status {
              if (!header_sent) {
                v1::KVRecord rec;
                *rec.mutable_header() = internal::HeaderToWire(h);
                if (!w->Push(std::move(rec))) {
                  client_gone = true;
                  return absl::CancelledError("client went away");
                }
                header_sent = true;
              }
              v1::KVRecord rec;
              ASSIGN_OR_RETURN(*rec.mutable_layer(), internal::LayerToWire(h, layer));
              bytes += rec.layer().k().size() + rec.layer().v().size();
              if (!w->Push(std::move(rec))) {
                client_gone = true;
                return absl::CancelledError("client went away");
              }
              return absl::OkStatus();
            });
        if (client_gone) return absl::CancelledError("client went away");
        if (!result.ok()) return result.status();
        if (!result->found) {
          return absl::NotFoundError("chunk " + key.ToHex() +
                                     " is not stored under this model fingerprint");
        }
        ctx_->metrics->Add("ragkv_kv_served_bytes_total", "", static_cast<double>(bytes));
        return absl::OkStatus();
      });
}

grpc::ServerReadReactor<v1::KVRecord>* KVStoreServiceImpl::PutChunk(
    grpc::CallbackServerContext* c, v1::PutChunkResponse* resp) {
  auto state = std::make_shared<PutState>();
  auto on_message = [state](v1::KVRecord&& rec) -> absl::Status {
    if (rec.has_header()) {
      if (state->have_header) return absl::InvalidArgumentError("PutChunk: second header");
      const v1::KVLayout& l = rec.header().layout();
      ASSIGN_OR_RETURN(kernels::DType dt, internal::FromWire(l.dtype()));
      if (l.num_layers() == 0 || l.num_kv_heads() == 0 || l.head_dim() == 0 ||
          l.num_tokens() == 0 || l.num_layers() > kvstore::kMaxLayers ||
          l.num_kv_heads() > kvstore::kMaxKvHeads || l.head_dim() > kvstore::kMaxHeadDim ||
          l.num_tokens() > kvstore::kMaxTokens) {
        return absl::InvalidArgumentError("PutChunk: layout out of range");
      }
      if (static_cast<uint32_t>(rec.header().token_ids_size()) != l.num_tokens()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("PutChunk: %d token ids for num_tokens %d",
                            rec.header().token_ids_size(), l.num_tokens()));
      }
      state->layer_bytes = static_cast<size_t>(l.num_kv_heads()) * l.num_tokens() *
                           l.head_dim() * kernels::DTypeSize(dt);
      state->header = std::move(*rec.mutable_header());
      state->have_header = true;
      return absl::OkStatus();
    }
    if (!rec.has_layer()) return absl::InvalidArgumentError("PutChunk: empty record");
    if (!state->have_header) return absl::InvalidArgumentError("PutChunk: layer before header");
    const v1::LayerKV& kv = rec.layer();
    if (kv.layer() != state->layers.size() ||
        kv.layer() >= state->header.layout().num_layers()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("PutChunk: got layer %d, expected %d", kv.layer(), state->layers.size()));
    }
    if (kv.k().size() != state->layer_bytes || kv.v().size() != state->layer_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("PutChunk: layer %d has %d/%d bytes, expected %d", kv.layer(),
                          kv.k().size(), kv.v().size(), state->layer_bytes));
    }
    if (kv.checksum() != internal::LayerChecksum(kv.k(), kv.v())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("PutChunk: layer %d checksum mismatch", kv.layer()));
    }
    state->layers.push_back(std::move(*rec.mutable_layer()));
    return absl::OkStatus();
  };
  auto on_end = [this, state, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedStore(ctx_));
    if (!state->have_header) return absl::InvalidArgumentError("PutChunk: no header");
    const v1::KVLayout& l = state->header.layout();
    if (state->layers.size() != l.num_layers()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "PutChunk: stream ended after %d of %d layers", state->layers.size(), l.num_layers()));
    }
    kvstore::KvChunkHeader h;
    ASSIGN_OR_RETURN(h.fingerprint, internal::FingerprintFromBytes(l.model_fingerprint()));
    if (ctx_->model != nullptr && h.fingerprint != ctx_->model->fingerprint()) {
      return absl::InvalidArgumentError(
          "PutChunk: model_fingerprint is not the served model's (" +
          model::FingerprintHex(ctx_->model->fingerprint()) + ")");
    }
    h.tokens.assign(state->header.token_ids().begin(), state->header.token_ids().end());
    ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseKey(state->header.key()));
    if (key != kvstore::ChunkKey::Of(h.fingerprint, h.tokens)) {
      return absl::InvalidArgumentError(
          "PutChunk: key is not ChunkKey::Of(fingerprint, token_ids) (docs/kv_format.md)");
    }
    h.key = key;
    ASSIGN_OR_RETURN(h.dtype, internal::FromWire(l.dtype()));
    h.codec = kvstore::Codec::kRaw;
    h.compression = kvstore::Compression::kNone;
    h.num_layers = l.num_layers();
    h.num_kv_heads = l.num_kv_heads();
    h.head_dim = l.head_dim();
    resp->set_key(state->header.key());
    if (ctx_->store->Contains(key)) {
      resp->set_already_present(true);
      return absl::OkStatus();
    }
    auto chunk = std::make_shared<kvstore::EncodedChunk>();
    ASSIGN_OR_RETURN(chunk->header, kvstore::EncodeHeader(&h));
    const int64_t H = h.num_kv_heads, T = h.num_tokens(), D = h.head_dim;
    for (const v1::LayerKV& kv : state->layers) {
      auto k = kernels::TensorView::Contiguous(kv.k().data(), h.dtype, {H, T, D});
      auto v = kernels::TensorView::Contiguous(kv.v().data(), h.dtype, {H, T, D});
      ASSIGN_OR_RETURN(std::string rec, kvstore::EncodeLayer(h, kv.layer(), k, v));
      chunk->layers.push_back(std::move(rec));
    }
    const size_t total = chunk->TotalBytes();
    RETURN_IF_ERROR(ctx_->store->Put(key, std::move(chunk)));
    resp->set_bytes_stored(total);
    ctx_->metrics->Add("ragkv_kv_put_bytes_total", "", static_cast<double>(total));
    return absl::OkStatus();
  };
  return new internal::CollectReader<v1::KVRecord>(c, ctx_->executor, ctx_->gate,
                                                   std::move(on_message), std::move(on_end));
}

grpc::ServerUnaryReactor* KVStoreServiceImpl::DeleteChunks(grpc::CallbackServerContext* c,
                                                           const v1::DeleteChunksRequest* req,
                                                           v1::DeleteChunksResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedStore(ctx_));
    RETURN_IF_ERROR(CheckKeyCount(req->keys()));
    std::vector<kvstore::ChunkKey> keys;
    for (const std::string& raw : req->keys()) {
      ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseKey(raw));
      keys.push_back(key);
    }
    uint32_t deleted = 0;
    for (const auto& key : keys) {
      const bool present = ctx_->store->Contains(key);
      RETURN_IF_ERROR(ctx_->store->Delete(key));
      deleted += present ? 1 : 0;
    }
    resp->set_deleted(deleted);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KVStoreServiceImpl::GetStats(grpc::CallbackServerContext* c,
                                                       const v1::GetStatsRequest*,
                                                       v1::StoreStats* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedStore(ctx_));
    for (const kvstore::TierStats& t : ctx_->store->TierStatsAll()) {
      v1::TierStats* o = resp->add_tiers();
      o->set_tier(t.name);
      o->set_hits(t.hits);
      o->set_misses(t.misses);
      o->set_bytes_read(t.bytes_read);
      o->set_bytes_written(t.bytes_written);
      o->set_bytes_used(t.bytes_used);
      o->set_capacity_bytes(t.capacity_bytes);
      o->set_entries(t.entries);
      o->set_evictions(t.evictions);
    }
    return absl::OkStatus();
  });
}

}  // namespace ragkv::services
