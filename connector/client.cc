#include "connector/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "connector/wire.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "ragkv/v1/blend.grpc.pb.h"
#include "ragkv/v1/engine.grpc.pb.h"
#include "ragkv/v1/kvstore.grpc.pb.h"
#include "ragkv/v1/precompute.grpc.pb.h"
#include "ragkv/v1/retrieval.grpc.pb.h"

namespace ragkv {

struct Client::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::RetrievalService::Stub> retrieval;
  std::unique_ptr<v1::KVStoreService::Stub> kvstore;
  std::unique_ptr<v1::PrecomputeService::Stub> precompute;
  std::unique_ptr<v1::BlendService::Stub> blend;
  std::unique_ptr<v1::EngineService::Stub> engine;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

namespace {

constexpr char kRequestIdKey[] = "x-request-id";

// FromGrpc: the server's status; its message names the call's request id
// (the server's own errors already end with "[request_id=...]").
// WithRequestId: `s` ending with "[request_id=...]" (unless it already does).
absl::Status WithRequestId(const absl::Status& s, const std::string& request_id) {
  if (s.ok() || request_id.empty() || s.message().find("[request_id=") != absl::string_view::npos) {
    return s;
  }
  return absl::Status(s.code(), absl::StrCat(s.message(), s.message().empty() ? "" : " ",
                                             "[request_id=", request_id, "]"));
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& request_id = "") {
  if (s.ok()) return absl::OkStatus();
  return WithRequestId(absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message()),
                       request_id);
}

// NewRequestId: "c-" + 16 random hex digits.
std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("c-%016x", rng());
}

// Retrier: runs attempts of one logical call (one request id) under one
// overall deadline.
class Retrier {
 public:
  Retrier(const ClientOptions& o, const CallOptions& call)
      : o_(o),
        request_id_out_(call.request_id_out),
        deadline_(absl::Now() + (call.deadline > absl::ZeroDuration() ? call.deadline
                                                                       : o.default_deadline)),
        request_id_(call.request_id.empty() ? NewRequestId() : call.request_id) {}

  // Run: attempt(ctx, &got_data) -> grpc::Status. Retries UNAVAILABLE while
  // no data was delivered and time and attempts remain.
  template <typename Attempt>
  absl::Status Run(Attempt&& attempt) {
    if (request_id_out_ != nullptr) *request_id_out_ = request_id_;
    if (!wire::IsValidRequestId(request_id_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CallOptions::request_id '", absl::CHexEscape(request_id_),
          "' must be 1-64 characters of A-Z a-z 0-9 . _ : - (nothing was sent)"));
    }
    absl::Duration backoff = o_.initial_backoff;
    thread_local std::mt19937 rng{std::random_device{}()};
    for (int i = 1;; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline_));
      if (!o_.auth_token.empty()) ctx.AddMetadata("authorization", "Bearer " + o_.auth_token);
      for (const auto& [key, value] : o_.metadata) ctx.AddMetadata(key, value);
      ctx.AddMetadata(kRequestIdKey, request_id_);
      bool got_data = false;
      grpc::Status s = attempt(&ctx, &got_data);
      if (s.ok() || s.error_code() != grpc::StatusCode::UNAVAILABLE || got_data ||
          i >= std::max(1, o_.max_attempts)) {
        return FromGrpc(s, request_id_);
      }
      std::uniform_real_distribution<double> jitter(0.8, 1.2);
      absl::Duration sleep = backoff * jitter(rng);
      if (absl::Now() + sleep >= deadline_) return FromGrpc(s, request_id_);
      absl::SleepFor(sleep);
      backoff = std::min(backoff * 2, o_.max_backoff);
    }
  }

  // Tag: an error found on the client side after the call (a checksum, a
  // cut stream) with this call's request id, as the server's errors have.
  absl::Status Tag(const absl::Status& s) const { return WithRequestId(s, request_id_); }

 private:
  const ClientOptions& o_;
  std::string* const request_id_out_;
  absl::Time deadline_;
  std::string request_id_;

};

template <typename Stub, typename Req, typename Resp>
absl::StatusOr<Resp> Unary(const ClientOptions& o, const CallOptions& call, Stub* stub,
                           grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                           const Req& req) {
  Resp resp;
  absl::Status s = Retrier(o, call).Run([&](grpc::ClientContext* ctx, bool*) {
    resp.Clear();
    return (stub->*method)(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return resp;
}

absl::Status VerifyLayer(const v1::LayerKV& kv) {
  uint64_t want = wire::LayerChecksum(kv.k(), kv.v());
  if (kv.checksum() != want) {
    return absl::DataLossError(absl::StrFormat(
        "layer %d: checksum mismatch (got %016x, computed %016x)", kv.layer(), kv.checksum(), want));
  }
  return absl::OkStatus();
}

// ReadBlendStream: drives a BlendResponse stream into `sink`.
absl::Status ReadBlendStream(grpc::ClientContext* ctx, grpc::ClientReader<v1::BlendResponse>* r,
                             KVSink* sink, bool* got_data, absl::Status* sink_error) {
  v1::BlendResponse msg;
  bool header_seen = false;
  int next_layer = 0;
  int num_layers = 0;
  size_t layer_bytes = 0;
  while (r->Read(&msg)) {
    *got_data = true;
    absl::Status s;
    switch (msg.part_case()) {
      case v1::BlendResponse::kHeader: {
        if (header_seen) {
          s = absl::InternalError("blend stream: second header");
          break;
        }
        header_seen = true;
        const v1::BlendHeader& h = msg.header();
        FusedPromptInfo info;
        info.num_layers = h.layout().num_layers();
        info.num_kv_heads = h.layout().num_kv_heads();
        info.head_dim = h.layout().head_dim();
        info.num_tokens = h.layout().num_tokens();
        info.dtype = wire::FromProto(h.layout().dtype());
        info.model_fingerprint = h.layout().model_fingerprint();
        info.token_ids.assign(h.token_ids().begin(), h.token_ids().end());
        if (info.token_ids.size() != h.layout().num_tokens()) {
          s = absl::InternalError(absl::StrFormat("blend stream: header lists %d token ids for %d tokens",
                                                  info.token_ids.size(), h.layout().num_tokens()));
          break;
        }
        for (const auto& sp : h.spans()) {
          info.spans.push_back({sp.begin(), sp.end(), sp.chunk_id(), sp.cache_hit(), sp.is_chunk(),
                                sp.chunk_begin()});
        }
        info.retrieved_chunk_ids.assign(h.retrieved_chunk_ids().begin(),
                                        h.retrieved_chunk_ids().end());
        num_layers = info.num_layers;
        layer_bytes = static_cast<size_t>(info.num_kv_heads) * info.num_tokens * info.head_dim *
                      WireDTypeSize(info.dtype);
        s = sink->OnHeader(info);
        if (!s.ok()) *sink_error = s;
        break;
      }
      case v1::BlendResponse::kLayer: {
        const v1::LayerKV& kv = msg.layer().kv();
        if (!header_seen || static_cast<int>(kv.layer()) != next_layer ||
            next_layer >= num_layers) {
          s = absl::InternalError(
              absl::StrFormat("blend stream: unexpected layer %d", kv.layer()));
          break;
        }
        if (kv.k().size() != layer_bytes || kv.v().size() != layer_bytes) {
          s = absl::InternalError(absl::StrFormat(
              "blend stream: layer %d has %d/%d bytes, expected %d", kv.layer(), kv.k().size(),
              kv.v().size(), layer_bytes));
          break;
        }
        s = VerifyLayer(kv);
        if (!s.ok()) break;
        ++next_layer;
        FusedLayerView view;
        view.layer = kv.layer();
        view.k = kv.k();
        view.v = kv.v();
        view.recomputed_mask = msg.layer().recomputed_mask();
        s = sink->OnLayer(view);
        if (!s.ok()) *sink_error = s;
        break;
      }
      case v1::BlendResponse::kRestart: {
        if (!header_seen) {
          s = absl::InternalError("blend stream: restart before the header");
          break;
        }
        next_layer = 0;  // layers 0.. come again
        s = sink->OnRestart(wire::FromProto(msg.restart().failed()));
        if (!s.ok()) *sink_error = s;
        break;
      }
      case v1::BlendResponse::kSummary: {
        if (next_layer != num_layers || !header_seen) {
          s = absl::InternalError("blend stream: summary before all layers");
          break;
        }
        BlendStats st;
        st.recomputed_tokens = msg.summary().recomputed_tokens();
        st.prefix_tokens = msg.summary().prefix_tokens();
        st.effective_ratio = msg.summary().effective_ratio();
        st.ratio = msg.summary().ratio();
        st.controller_reason = msg.summary().controller_reason();
        st.quality_gate = msg.summary().quality_gate();
        for (const auto& t : msg.summary().timings()) st.timings_ms.emplace_back(t.stage(), t.ms());
        for (const auto& f : msg.summary().failed_loads()) {
          st.failed_loads.push_back(wire::FromProto(f));
        }
        s = sink->OnSummary(st);
        if (!s.ok()) *sink_error = s;
        break;
      }
      default:
        s = absl::InternalError("blend stream: empty message");
    }
    if (!s.ok()) {
      ctx->TryCancel();
      r->Finish().IgnoreError();
      return s;
    }
  }
  grpc::Status fin = r->Finish();
  if (fin.ok() && (!header_seen || next_layer != num_layers)) {
    return absl::InternalError("blend stream ended early");
  }
  return FromGrpc(fin);
}

}  // namespace

Client::Client(ClientOptions options) : options_(std::move(options)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.target.empty()) return absl::InvalidArgumentError("client: empty target");
  if (options.max_attempts < 1) return absl::InvalidArgumentError("client: max_attempts < 1");
  std::unique_ptr<Client> c(new Client(std::move(options)));
  const ClientOptions& o = c->options_;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(o.max_message_bytes);
  args.SetMaxSendMessageSize(o.max_message_bytes);
  // Our own retry loop decides; keep gRPC's transparent retries only.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.tls_root_certs_pem;
    creds = grpc::SslCredentials(ssl);
    if (!o.tls_server_name.empty()) args.SetSslTargetNameOverride(o.tls_server_name);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  c->stubs_ = std::make_unique<Stubs>();
  Stubs& s = *c->stubs_;
  s.channel = grpc::CreateCustomChannel(o.target, creds, args);
  s.retrieval = v1::RetrievalService::NewStub(s.channel);
  s.kvstore = v1::KVStoreService::NewStub(s.channel);
  s.precompute = v1::PrecomputeService::NewStub(s.channel);
  s.blend = v1::BlendService::NewStub(s.channel);
  s.engine = v1::EngineService::NewStub(s.channel);
  s.health = grpc::health::v1::Health::NewStub(s.channel);
  return c;
}

// --- retrieval ---

absl::StatusOr<v1::IngestDocumentsResponse> Client::IngestDocuments(
    const std::vector<v1::Document>& docs, const CallOptions& call) {
  v1::IngestDocumentsResponse resp;
  absl::Status s = Retrier(options_, call).Run([&](grpc::ClientContext* ctx, bool*) {
    resp.Clear();
    auto w = stubs_->retrieval->IngestDocuments(ctx, &resp);
    v1::IngestDocumentsRequest req;
    for (const auto& d : docs) {
      *req.mutable_document() = d;
      if (!w->Write(req)) break;  // the server ended the call; Finish says why
    }
    w->WritesDone();
    return w->Finish();
  });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::DeleteDocumentResponse> Client::DeleteDocument(const std::string& doc_id,
                                                                  const CallOptions& call) {
  v1::DeleteDocumentRequest req;
  req.set_doc_id(doc_id);
  return Unary(options_, call, stubs_->retrieval.get(),
               &v1::RetrievalService::Stub::DeleteDocument, req);
}

absl::StatusOr<v1::SearchResponse> Client::Search(const v1::SearchRequest& request,
                                                  const CallOptions& call) {
  return Unary(options_, call, stubs_->retrieval.get(), &v1::RetrievalService::Stub::Search,
               request);
}

absl::StatusOr<v1::GetChunksResponse> Client::GetChunks(const std::vector<uint64_t>& chunk_ids,
                                                        const CallOptions& call) {
  v1::GetChunksRequest req;
  for (uint64_t id : chunk_ids) req.add_chunk_ids(id);
  return GetChunks(req, call);
}

absl::StatusOr<v1::GetChunksResponse> Client::GetChunks(const v1::GetChunksRequest& request,
                                                        const CallOptions& call) {
  return Unary(options_, call, stubs_->retrieval.get(), &v1::RetrievalService::Stub::GetChunks,
               request);
}

absl::StatusOr<v1::ChunkDocumentsResponse> Client::ChunkDocuments(
    const std::vector<v1::Document>& docs, const CallOptions& call) {
  v1::ChunkDocumentsRequest req;
  for (const v1::Document& d : docs) *req.add_documents() = d;
  return Unary(options_, call, stubs_->retrieval.get(), &v1::RetrievalService::Stub::ChunkDocuments,
               req);
}

// --- KV store ---

absl::StatusOr<v1::LookupResponse> Client::Lookup(const std::vector<std::string>& keys,
                                                  const CallOptions& call) {
  v1::LookupRequest req;
  for (const auto& k : keys) req.add_keys(k);
  return Unary(options_, call, stubs_->kvstore.get(), &v1::KVStoreService::Stub::Lookup, req);
}

absl::StatusOr<std::vector<bool>> Client::Contains(const std::vector<std::string>& keys,
                                                   const CallOptions& call) {
  v1::ContainsRequest req;
  for (const auto& k : keys) req.add_keys(k);
  ASSIGN_OR_RETURN(v1::ContainsResponse resp,
                   Unary(options_, call, stubs_->kvstore.get(),
                         &v1::KVStoreService::Stub::Contains, req));
  return std::vector<bool>(resp.present().begin(), resp.present().end());
}

absl::StatusOr<StoredChunk> Client::GetChunk(const std::string& key,
                                             const std::string& model_fingerprint,
                                             const CallOptions& call) {
  v1::GetChunkRequest req;
  req.set_key(key);
  req.set_model_fingerprint(model_fingerprint);
  StoredChunk out;
  absl::Status verify;
  Retrier retrier(options_, call);
  absl::Status s = retrier.Run([&](grpc::ClientContext* ctx, bool* got) {
    out = StoredChunk();
    auto r = stubs_->kvstore->GetChunk(ctx, req);
    v1::KVRecord rec;
    bool header = false;
    while (r->Read(&rec)) {
      *got = true;
      if (rec.has_header() && !header) {
        out.header = rec.header();
        header = true;
      } else if (rec.has_layer() && header &&
                 rec.layer().layer() == static_cast<uint32_t>(out.layers.size())) {
        verify = VerifyLayer(rec.layer());
        if (!verify.ok()) break;
        out.layers.push_back(std::move(*rec.mutable_layer()));
      } else {
        verify = absl::InternalError("GetChunk: malformed record stream");
        break;
      }
    }
    if (!verify.ok()) {
      ctx->TryCancel();
      r->Finish().IgnoreError();
      return grpc::Status::OK;
    }
    return r->Finish();
  });
  if (!s.ok()) return s;
  if (!verify.ok()) return retrier.Tag(verify);
  if (out.layers.size() != out.header.layout().num_layers()) {
    return retrier.Tag(absl::InternalError("GetChunk: stream ended before the last layer"));
  }
  return out;
}

absl::StatusOr<v1::PutChunkResponse> Client::PutChunk(const StoredChunk& chunk,
                                                      const CallOptions& call) {
  v1::PutChunkResponse resp;
  absl::Status s = Retrier(options_, call).Run([&](grpc::ClientContext* ctx, bool*) {
    resp.Clear();
    auto w = stubs_->kvstore->PutChunk(ctx, &resp);
    v1::KVRecord rec;
    *rec.mutable_header() = chunk.header;
    bool ok = w->Write(rec);
    for (size_t i = 0; ok && i < chunk.layers.size(); ++i) {
      *rec.mutable_layer() = chunk.layers[i];
      if (rec.layer().checksum() == 0) {
        rec.mutable_layer()->set_checksum(wire::LayerChecksum(rec.layer().k(), rec.layer().v()));
      }
      ok = w->Write(rec);
    }
    w->WritesDone();
    return w->Finish();
  });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::DeleteChunksResponse> Client::DeleteChunks(const std::vector<std::string>& keys,
                                                              const CallOptions& call) {
  v1::DeleteChunksRequest req;
  for (const auto& k : keys) req.add_keys(k);
  return Unary(options_, call, stubs_->kvstore.get(), &v1::KVStoreService::Stub::DeleteChunks,
               req);
}

absl::StatusOr<v1::StoreStats> Client::GetStats(const CallOptions& call) {
  return Unary(options_, call, stubs_->kvstore.get(), &v1::KVStoreService::Stub::GetStats,
               v1::GetStatsRequest());
}

// --- precompute ---

absl::StatusOr<v1::Job> Client::StartJob(const v1::StartJobRequest& request,
                                         const CallOptions& call) {
  return Unary(options_, call, stubs_->precompute.get(),
               &v1::PrecomputeService::Stub::StartJob, request);
}

absl::StatusOr<v1::Job> Client::GetJob(const std::string& job_id, const CallOptions& call) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  return Unary(options_, call, stubs_->precompute.get(), &v1::PrecomputeService::Stub::GetJob,
               req);
}

absl::StatusOr<v1::Job> Client::WatchJob(const std::string& job_id,
                                         const std::function<bool(const v1::Job&)>& on_update,
                                         uint32_t interval_ms, const CallOptions& call) {
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  req.set_interval_ms(interval_ms);
  v1::Job last;
  bool stopped = false;
  Retrier retrier(options_, call);
  absl::Status s = retrier.Run([&](grpc::ClientContext* ctx, bool* got) {
    auto r = stubs_->precompute->WatchJob(ctx, req);
    v1::Job job;
    while (r->Read(&job)) {
      *got = true;
      last = job;
      if (!on_update(job)) {
        stopped = true;
        ctx->TryCancel();
        break;
      }
    }
    grpc::Status fin = r->Finish();
    return stopped ? grpc::Status::OK : fin;
  });
  if (!s.ok()) return s;
  if (stopped) return retrier.Tag(absl::CancelledError("WatchJob stopped by the caller"));
  return last;
}

absl::StatusOr<v1::Job> Client::CancelJob(const std::string& job_id, const CallOptions& call) {
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  return Unary(options_, call, stubs_->precompute.get(),
               &v1::PrecomputeService::Stub::CancelJob, req);
}

// --- blend ---

namespace {

// StreamBlend: one server-streamed blend call (Blend or RetrieveAndBlend)
// into `sink`, retried on UNAVAILABLE only while nothing has arrived.
template <typename Request, typename Start>
absl::Status StreamBlend(const ClientOptions& options, const CallOptions& call,
                         const Request& request, KVSink* sink, Start start) {
  absl::Status result;
  Retrier retrier(options, call);
  absl::Status s = retrier.Run([&](grpc::ClientContext* ctx, bool* got) {
    auto r = start(ctx, request);
    absl::Status sink_error;
    result = ReadBlendStream(ctx, r.get(), sink, got, &sink_error);
    if (result.code() == absl::StatusCode::kUnavailable && !*got) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(result.message()));
    }
    return grpc::Status::OK;
  });
  if (!s.ok()) return s;
  return retrier.Tag(result);  // the stream's own errors (sink, checksum, the server's)
}

}  // namespace

absl::Status Client::Blend(const v1::BlendRequest& request, KVSink* sink,
                           const CallOptions& call) {
  v1::BlendRequest req = request;
  req.mutable_options()->set_accept_restart(true);  // ReadBlendStream handles it
  return StreamBlend(options_, call, req, sink,
                     [this](grpc::ClientContext* ctx, const v1::BlendRequest& r) {
                       return stubs_->blend->Blend(ctx, r);
                     });
}

absl::Status Client::RetrieveAndBlend(const v1::RetrieveAndBlendRequest& request, KVSink* sink,
                                      const CallOptions& call) {
  v1::RetrieveAndBlendRequest req = request;
  req.mutable_options()->set_accept_restart(true);
  return StreamBlend(options_, call, req, sink,
                     [this](grpc::ClientContext* ctx, const v1::RetrieveAndBlendRequest& r) {
                       return stubs_->blend->RetrieveAndBlend(ctx, r);
                     });
}

// --- engine ---

absl::StatusOr<v1::GenerateResponse> Client::Generate(const v1::GenerateRequest& request,
                                                      const CallOptions& call) {
  return Unary(options_, call, stubs_->engine.get(), &v1::EngineService::Stub::Generate,
               request);
}

// --- health ---

absl::Status Client::HealthCheck(const std::string& service, const CallOptions& call) {
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  Retrier retrier(options_, call);
  RETURN_IF_ERROR(retrier.Run([&](grpc::ClientContext* ctx, bool*) {
    resp.Clear();
    return stubs_->health->Check(ctx, req, &resp);
  }));
  if (resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return retrier.Tag(absl::UnavailableError(absl::StrFormat("service '%s' is not serving", service)));
  }
  return absl::OkStatus();
}

}  // namespace ragkv
