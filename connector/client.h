// client.h: ragkv::Client, the C++ client of the ragkv sidecar (every RPC of
// proto/ragkv/v1), for engines and tools.
//
// Every call carries a deadline (ClientOptions::default_deadline unless the
// call passes one). Calls that fail with UNAVAILABLE before any response
// message arrived are retried with exponential backoff and jitter, up to
// max_attempts (all ragkv RPCs are idempotent: puts are keyed by content,
// ingest replaces a doc_id, blends are pure). A server stream that fails
// after delivering data is not retried (the sink has already seen data).
// Errors are absl::Status with the server's code and message.
//
// Fused KV (Blend / RetrieveAndBlend) is delivered layer by layer into a
// KVSink (kv_sink.h) as it arrives; each layer's XXH3-64 checksum is
// verified first (DataLoss on mismatch).
//
// Thread safety: a Client is thread-safe; share one per process (it holds
// one HTTP/2 channel). Create is cheap; the channel connects lazily.
#ifndef RAGKV_CONNECTOR_CLIENT_H_
#define RAGKV_CONNECTOR_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "connector/kv_sink.h"
#include "ragkv/v1/blend.pb.h"
#include "ragkv/v1/engine.pb.h"
#include "ragkv/v1/kvstore.pb.h"
#include "ragkv/v1/precompute.pb.h"
#include "ragkv/v1/retrieval.pb.h"

namespace ragkv {

struct ClientOptions {
  // target: gRPC target, e.g. "127.0.0.1:50051" or "dns:///host:port".
  std::string target;
  // auth_token: sent as "authorization: Bearer <token>" when non-empty.
  std::string auth_token;
  // metadata: extra (key, value) pairs sent with every call (keys
  // lower-case). Default none.
  std::vector<std::pair<std::string, std::string>> metadata;
  // use_tls: TLS channel; tls_root_certs_pem: PEM roots (empty = system
  // roots); tls_server_name: override of the name checked in the server
  // certificate (empty = from target).
  bool use_tls = false;
  std::string tls_root_certs_pem;
  std::string tls_server_name;
  // default_deadline: per call, including retries' backoff.
  absl::Duration default_deadline = absl::Seconds(60);
  // Retries on UNAVAILABLE: attempts in total (1 = no retry), backoff doubles
  // from initial_backoff up to max_backoff, +-20% jitter.
  int max_attempts = 5;
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // max_message_bytes: receive/send limit of the channel (default 64 MiB).
  int max_message_bytes = 64 << 20;
};

// StoredChunk: a chunk read with GetChunk: header then layers 0..L-1.
struct StoredChunk {
  v1::KVHeader header;
  std::vector<v1::LayerKV> layers;
};

class Client {
 public:
  // Create: InvalidArgument when target is empty or options are invalid.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // deadline <= 0 below means options().default_deadline.

  // --- retrieval (RetrievalService) ---
  absl::StatusOr<v1::IngestDocumentsResponse> IngestDocuments(
      const std::vector<v1::Document>& docs, absl::Duration deadline = {});
  absl::StatusOr<v1::DeleteDocumentResponse> DeleteDocument(const std::string& doc_id,
                                                             absl::Duration deadline = {});
  absl::StatusOr<v1::SearchResponse> Search(const v1::SearchRequest& request,
                                            absl::Duration deadline = {});
  absl::StatusOr<v1::GetChunksResponse> GetChunks(const std::vector<uint64_t>& chunk_ids,
                                                  absl::Duration deadline = {});

  // --- KV store (KVStoreService) ---
  absl::StatusOr<v1::LookupResponse> Lookup(const std::vector<std::string>& keys,
                                            absl::Duration deadline = {});
  absl::StatusOr<std::vector<bool>> Contains(const std::vector<std::string>& keys,
                                             absl::Duration deadline = {});
  // GetChunk: the whole chunk (layers verified against their checksums).
  absl::StatusOr<StoredChunk> GetChunk(const std::string& key,
                                       const std::string& model_fingerprint = "",
                                       absl::Duration deadline = {});
  // PutChunk: streams header + layers (checksums filled in when zero).
  absl::StatusOr<v1::PutChunkResponse> PutChunk(const StoredChunk& chunk,
                                                absl::Duration deadline = {});
  absl::StatusOr<v1::DeleteChunksResponse> DeleteChunks(const std::vector<std::string>& keys,
                                                        absl::Duration deadline = {});
  absl::StatusOr<v1::StoreStats> GetStats(absl::Duration deadline = {});

  // --- precompute (PrecomputeService) ---
  absl::StatusOr<v1::Job> StartJob(const v1::StartJobRequest& request,
                                   absl::Duration deadline = {});
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id, absl::Duration deadline = {});
  // WatchJob: calls on_update for every state until a terminal one (returned)
  // or until on_update returns false (then Cancelled).
  absl::StatusOr<v1::Job> WatchJob(const std::string& job_id,
                                   const std::function<bool(const v1::Job&)>& on_update,
                                   uint32_t interval_ms = 500, absl::Duration deadline = {});
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, absl::Duration deadline = {});

  // --- blend (BlendService) ---
  // Blend / RetrieveAndBlend: stream the fused KV into `sink`. An error from
  // the sink cancels the call and is returned.
  absl::Status Blend(const v1::BlendRequest& request, KVSink* sink, absl::Duration deadline = {});
  absl::Status RetrieveAndBlend(const v1::RetrieveAndBlendRequest& request, KVSink* sink,
                                absl::Duration deadline = {});

  // --- reference engine (EngineService) ---
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request,
                                                absl::Duration deadline = {});

  // --- gRPC health (grpc.health.v1) ---
  // HealthCheck: OK when `service` ("" = whole server) is SERVING.
  absl::Status HealthCheck(const std::string& service = "", absl::Duration deadline = {});

  const ClientOptions& options() const { return options_; }


 private:
  struct Stubs;
  explicit Client(ClientOptions options);

  ClientOptions options_;
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace ragkv

#endif  // RAGKV_CONNECTOR_CLIENT_H_
