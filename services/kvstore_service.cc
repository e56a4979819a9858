#include "services/kvstore_service.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "connector/wire.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "services/internal/grpc_util.h"
#include "services/internal/kv_wire.h"
#include "services/internal/validate.h"

namespace ragkv::services {
namespace {

using internal::RunUnary;

absl::Status NeedStore(const ServiceContext* ctx) {
  if (ctx->store == nullptr) return absl::FailedPreconditionError("this server has no KV store");
  return absl::OkStatus();
}

using internal::ParseChunkKey;

// StoredBeyondTier0: whether a tier below the fastest one holds `key`. A
// chunk that only tier 0 (RAM) holds may be a concurrent Put still writing
// the lower tiers; acknowledging a duplicate Put as already_present then
// would break "acknowledged == durable" if the process died before that
// write finished (tests/integration/put_storm_kill_test.cc).
bool StoredBeyondTier0(kvstore::TieredStore* store, const kvstore::ChunkKey& key) {
  const size_t n = store->num_tiers();
  for (size_t i = n > 1 ? 1 : 0; i < n; ++i) {
    absl::StatusOr<bool> c = store->tier(i).Contains(key);
    if (c.ok() && *c) return true;
  }
  return false;
}

// ResolveFingerprint: the request's, else the served model's, else the one
// stored in the fastest tier's header of `key` (nullopt: not stored).
absl::StatusOr<std::optional<kvstore::Fingerprint>> ResolveFingerprint(
    const ServiceContext* ctx, const kvstore::ChunkKey& key, const std::string& requested) {
  if (!requested.empty()) {
    ASSIGN_OR_RETURN(auto fp, wire::FingerprintFromBytes(requested));
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

}  // namespace

grpc::ServerUnaryReactor* KVStoreServiceImpl::Lookup(grpc::CallbackServerContext* c,
                                                     const v1::LookupRequest* req,
                                                     v1::LookupResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedStore(ctx_));
    RETURN_IF_ERROR(internal::ValidateKeyList(req->keys()));
    for (const std::string& raw : req->keys()) {
      ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseChunkKey(raw));
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
    RETURN_IF_ERROR(internal::ValidateKeyList(req->keys()));
    for (const std::string& raw : req->keys()) {
      ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseChunkKey(raw));
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
        RETURN_IF_ERROR(internal::ValidateGetChunkRequest(*req));
        RETURN_IF_ERROR(NeedStore(ctx_));
        ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseChunkKey(req->key()));
        ASSIGN_OR_RETURN(auto fp, ResolveFingerprint(ctx_, key, req->model_fingerprint()));
        if (!fp) return absl::NotFoundError("chunk " + key.ToHex() + " is not stored");
        bool header_sent = false;
        bool client_gone = false;
        uint64_t bytes = 0;
        auto result = ctx_->store->StreamLayers(
            key, *fp,
            [&](const kvstore::KvChunkHeader& h, kvstore::LoadedLayer layer) -> absl::Status {
              if (!header_sent) {
                // The wire header has no record context: a record whose keys
                // sit at another context's positions never leaves as a
                // chunk-local one (docs/kv_format.md "Neighbour-aware records").
                RETURN_IF_ERROR(kvstore::CheckRecordContext(h, kvstore::RecordContext::kChunkLocal));
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

grpc::ServerReadReactor<grpc::ByteBuffer>* KVStoreServiceImpl::PutChunk(
    grpc::CallbackServerContext* c, grpc::ByteBuffer* wire_resp) {
  internal::PutChunkAssembler::Options ao;
  ao.expect = ctx_->put_expect;
  ao.max_chunk_bytes = ctx_->max_put_chunk_bytes;
  ao.budget = ctx_->put_budget;
  auto state = std::make_shared<internal::PutChunkAssembler>(ao);
  auto resp = std::make_shared<v1::PutChunkResponse>();
  // Each layer goes to the store as it is encoded (TieredStore::BeginPut:
  // the SSD tier writes it at once), so a stream holds one layer, not the
  // chunk; the chunk becomes visible only at Commit in on_end. A stream
  // that fails or is cut destroys the writer, which aborts it everywhere.
  auto writer = std::make_shared<std::unique_ptr<kvstore::ChunkWriter>>();
  auto present = std::make_shared<bool>(false);
  internal::PutChunkAssembler* a = state.get();
  state->SetLayerSink([this, a, writer, present](uint32_t layer, std::string rec) -> absl::Status {
    if (layer == 0) {
      RETURN_IF_ERROR(NeedStore(ctx_));
      ASSIGN_OR_RETURN(kvstore::KvChunkHeader h, a->Header());
      if (!a->header().replace() && StoredBeyondTier0(ctx_->store, h.key)) {
        *present = true;  // first writer wins; the layers are checked, not stored
        return absl::OkStatus();
      }
      ASSIGN_OR_RETURN(*writer, ctx_->store->BeginPut(h.key, a->header_blob(), a->total_bytes()));
    }
    return *present ? absl::OkStatus() : (*writer)->AddLayer(rec);
  });
  auto on_message = [state](v1::KVRecord&& rec) -> absl::Status {
    return state->Add(std::move(rec));
  };
  auto on_end = [this, state, resp, writer, present]() -> absl::Status {
    RETURN_IF_ERROR(NeedStore(ctx_));
    ASSIGN_OR_RETURN(kvstore::KvChunkHeader h, state->Finish());
    resp->set_key(state->header().key());
    if (*present) {
      resp->set_already_present(true);
      return absl::OkStatus();
    }
    if (*writer == nullptr) return absl::InternalError("PutChunk: no store writer");
    const uint64_t total = state->total_bytes();
    // Write-through (backends.cc): OK means every required tier -- the SSD
    // tier, RocksDB WAL written (and fsynced with --sync-writes) -- holds
    // the chunk, so an acknowledged Put survives kill -9.
    RETURN_IF_ERROR((*writer)->Commit());
    writer->reset();
    resp->set_bytes_stored(total);
    if (state->header().replace()) resp->set_replaced(true);
    ctx_->metrics->Add("ragkv_kv_put_bytes_total", "", static_cast<double>(total));
    return absl::OkStatus();
  };
  return new internal::CollectReader<v1::KVRecord, v1::PutChunkResponse>(
      c, wire_resp, resp, ctx_->executor, ctx_->gate, std::move(on_message), std::move(on_end));
}

grpc::ServerUnaryReactor* KVStoreServiceImpl::DeleteChunks(grpc::CallbackServerContext* c,
                                                           const v1::DeleteChunksRequest* req,
                                                           v1::DeleteChunksResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedStore(ctx_));
    RETURN_IF_ERROR(internal::ValidateKeyList(req->keys()));
    std::vector<kvstore::ChunkKey> keys;
    for (const std::string& raw : req->keys()) {
      ASSIGN_OR_RETURN(kvstore::ChunkKey key, ParseChunkKey(raw));
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
