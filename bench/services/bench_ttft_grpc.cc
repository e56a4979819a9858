#include "bench/services/bench_ttft_grpc.h"

#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "connector/client.h"
#include "connector/wire.h"
#include "kvstore/chunk_key.h"
#include "services/sidecar.h"

namespace ragkv::services {

struct GrpcTtftPath::Impl {
  std::string data_dir;
  std::unique_ptr<Sidecar> sidecar;
  std::unique_ptr<Client> client;
};

GrpcTtftPath::GrpcTtftPath(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcTtftPath::~GrpcTtftPath() {
  if (impl_ == nullptr) return;
  impl_->client.reset();
  if (impl_->sidecar != nullptr) impl_->sidecar->Shutdown(absl::Seconds(2));
}

absl::StatusOr<std::unique_ptr<GrpcTtftPath>> GrpcTtftPath::Start(const GrpcTtftOptions& o) {
  SidecarOptions so;
  so.listen = "127.0.0.1:0";
  so.metrics_port = -1;
  so.data_dir = o.data_dir;
  so.sync_writes = false;
  so.model_path = o.model_spec;
  so.tokenizer_path = o.tokenizer;
  so.max_seq_len = o.max_seq_len;
  so.chunk_tokens = o.chunk_tokens;
  so.ram_budget_bytes = uint64_t{4} << 30;  // every stored chunk stays in RAM
  so.max_message_bytes = 256 << 20;
  so.kv_tiers = o.kv_tiers.empty() ? std::vector<std::string>{"ram"} : o.kv_tiers;
  so.redis_url = o.redis_url;
  so.store_back = false;  // the bench stores every chunk itself; no background prefills while timed
  if (o.first_position_records) {  // written by store-back in a warm pass, drained before timing
    so.first_position_records = true;
    so.store_back = true;
    so.prefix_cache = false;  // like the plain arm: only the records differ
  }
  auto impl = std::make_unique<Impl>();
  impl->data_dir = o.data_dir;
  ASSIGN_OR_RETURN(impl->sidecar, Sidecar::Start(so));
  ClientOptions co;
  co.target = impl->sidecar->address();
  co.default_deadline = absl::Minutes(10);
  co.max_message_bytes = 256 << 20;
  ASSIGN_OR_RETURN(impl->client, Client::Create(co));
  RETURN_IF_ERROR(impl->client->HealthCheck());
  return std::unique_ptr<GrpcTtftPath>(new GrpcTtftPath(std::move(impl)));
}

void GrpcTtftPath::DrainStoreBack() const { impl_->sidecar->DrainStoreBack(); }

std::string GrpcTtftPath::address() const { return impl_->sidecar->address(); }

const std::string& GrpcTtftPath::data_dir() const { return impl_->data_dir; }

Client* GrpcTtftPath::client() const { return impl_->client.get(); }

absl::StatusOr<std::vector<CatalogueChunk>> GrpcTtftPath::Ingest(
    const std::vector<std::string>& texts, const std::string& doc_prefix, bool first_chunk_only) {
  std::vector<v1::Document> docs;
  for (size_t i = 0; i < texts.size(); ++i) {
    v1::Document d;
    d.set_doc_id(absl::StrCat(doc_prefix, i));
    d.set_text(texts[i]);
    docs.push_back(std::move(d));
  }
  ASSIGN_OR_RETURN(v1::IngestDocumentsResponse resp, impl_->client->IngestDocuments(docs));
  if (resp.ingested_size() != static_cast<int>(texts.size())) {
    return absl::InternalError(absl::StrCat("bench ttft grpc: ", resp.ingested_size(),
                                            " documents ingested of ", texts.size()));
  }
  std::vector<uint64_t> ids;
  for (const auto& d : resp.ingested()) {
    if (d.chunk_ids_size() == 0 || (d.chunk_ids_size() != 1 && !first_chunk_only)) {
      return absl::FailedPreconditionError(
          absl::StrCat("bench ttft grpc: document ", d.doc_id(), " became ", d.chunk_ids_size(),
                       " chunks (expected one)"));
    }
    ids.push_back(d.chunk_ids(0));
  }
  ASSIGN_OR_RETURN(v1::GetChunksResponse chunks, impl_->client->GetChunks(ids));
  std::vector<CatalogueChunk> out;
  for (const auto& c : chunks.chunks()) {
    CatalogueChunk cc;
    cc.chunk_id = c.chunk_id();
    cc.tokens.assign(c.token_ids().begin(), c.token_ids().end());
    cc.kv_key = c.kv_key();
    out.push_back(std::move(cc));
  }
  if (out.size() != ids.size()) return absl::InternalError("bench ttft grpc: GetChunks short");
  return out;
}

absl::Status GrpcTtftPath::Put(const CatalogueChunk& chunk, const blend::ChunkKV& kv) {
  const kvstore::ChunkKey key = kvstore::ChunkKey::Of(kv.info.fingerprint, chunk.tokens);
  if (key.AsBytes() != chunk.kv_key) {
    return absl::FailedPreconditionError(
        "bench ttft grpc: the sidecar's model fingerprint differs from the bench's");
  }
  if (kv.tokens != chunk.tokens) {
    return absl::InvalidArgumentError("bench ttft grpc: KV of other tokens");
  }
  StoredChunk sc;
  sc.header.set_key(std::string(key.AsBytes()));
  v1::KVLayout* lay = sc.header.mutable_layout();
  lay->set_num_layers(kv.info.num_layers);
  lay->set_num_kv_heads(kv.info.kv_heads);
  lay->set_head_dim(kv.info.head_dim);
  lay->set_num_tokens(static_cast<uint32_t>(kv.info.num_tokens));
  lay->set_dtype(wire::ToProto(kv.info.dtype));
  if (lay->dtype() == v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("bench ttft grpc: KV dtype not storable");
  }
  lay->set_model_fingerprint(wire::FingerprintBytes(kv.info.fingerprint));
  sc.header.mutable_token_ids()->Assign(chunk.tokens.begin(), chunk.tokens.end());
  for (int l = 0; l < kv.info.num_layers; ++l) {
    v1::LayerKV lk;
    lk.set_layer(l);
    lk.set_k(std::string(reinterpret_cast<const char*>(kv.k[l].data()), kv.k[l].size()));
    lk.set_v(std::string(reinterpret_cast<const char*>(kv.v[l].data()), kv.v[l].size()));
    sc.layers.push_back(std::move(lk));
  }
  return impl_->client->PutChunk(sc).status();
}

absl::StatusOr<GrpcOutcome> GrpcTtftPath::Generate(const std::vector<uint64_t>& chunk_ids,
                                                   const std::vector<int32_t>& query,
                                                   blend::Strategy strategy, double ratio,
                                                   bool auto_ratio) {
  v1::GenerateRequest req;
  req.mutable_question_tokens()->Assign(query.begin(), query.end());
  for (uint64_t id : chunk_ids) req.add_chunk_ids(id);
  req.set_max_new_tokens(1);  // TTFT: the first token, no decode step
  v1::BlendOptions* bo = req.mutable_blend();
  switch (strategy) {
    case blend::Strategy::kFullPrefill: bo->set_mode(v1::BLEND_MODE_FULL_PREFILL); break;
    case blend::Strategy::kPrefixReuse: bo->set_mode(v1::BLEND_MODE_PREFIX_CACHING); break;
    case blend::Strategy::kFullReuse: bo->set_mode(v1::BLEND_MODE_FULL_REUSE); break;
    case blend::Strategy::kCacheBlend:
      bo->set_mode(v1::BLEND_MODE_CACHEBLEND);
      bo->set_recompute_ratio(static_cast<float>(ratio));
      break;
  }
  if (auto_ratio) {
    bo->set_mode(v1::BLEND_MODE_AUTO);
    bo->clear_recompute_ratio();
  }
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(v1::GenerateResponse resp, impl_->client->Generate(req));
  GrpcOutcome o;
  o.ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (resp.answer_tokens_size() != 1) {
    return absl::InternalError("bench ttft grpc: Generate did not return one token");
  }
  const v1::TtftBreakdown& t = resp.ttft();
  o.engine_ttft_s = t.ttft_ms() / 1e3;
  o.fetch_s = t.fetch_ms() / 1e3;
  o.blend_s = t.blend_ms() / 1e3;
  o.query_prefill_s = t.query_prefill_ms() / 1e3;
  o.context_tokens = resp.context_tokens();
  o.recomputed_tokens = resp.recomputed_tokens();
  o.ratio = resp.blend_ratio();
  o.controller_reason = resp.controller_reason();
  return o;
}

std::string SyntheticChunkText(int bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> letter('a', 'z'), len(2, 8);
  std::string s;
  while (static_cast<int>(s.size()) < bytes) {
    if (!s.empty()) s.push_back(' ');
    const int n = len(rng);
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(letter(rng)));
  }
  s.resize(bytes);
  // Never end on the separator (the chunker trims whitespace).
  if (!s.empty() && s.back() == ' ') s.back() = static_cast<char>(letter(rng));
  return s;
}

}  // namespace ragkv::services
