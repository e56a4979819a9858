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

// CallOptions: per call. Converts implicitly from a deadline, so
// `client->Search(req, absl::Seconds(5))` works as it reads.
struct CallOptions {
  CallOptions() = default;
  CallOptions(absl::Duration d) : deadline(d) {}  // NOLINT(google-explicit-constructor)
  // deadline: of the whole call, retries' backoff included; <= 0:
  // ClientOptions::default_deadline.
  absl::Duration deadline;
  // request_id: sent as `x-request-id` metadata, the same on every retry;
  // the server puts it in its log lines, its error messages and its
  // response metadata. 1-64 characters of A-Z a-z 0-9 . _ : - (else the
  // call fails with InvalidArgument before sending). Empty: the client
  // makes one ("c-" + 16 hex digits).
  std::string request_id;
  // request_id_out: when non-null, receives the call's id (the server uses
  // and echoes the id it is sent).
  std::string* request_id_out = nullptr;
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

  // Every call takes CallOptions (a deadline converts to one). Errors are
  // the server's status; their message ends with "[request_id=...]".

  // --- retrieval (RetrievalService) ---
  absl::StatusOr<v1::IngestDocumentsResponse> IngestDocuments(
      const std::vector<v1::Document>& docs, const CallOptions& call = {});
  absl::StatusOr<v1::DeleteDocumentResponse> DeleteDocument(const std::string& doc_id,
                                                             const CallOptions& call = {});
  absl::StatusOr<v1::SearchResponse> Search(const v1::SearchRequest& request,
                                            const CallOptions& call = {});
  absl::StatusOr<v1::GetChunksResponse> GetChunks(const std::vector<uint64_t>& chunk_ids,
                                                  const CallOptions& call = {});
  // GetChunks: the chunks a request names (chunk ids, then every chunk of
  // its doc ids).
  absl::StatusOr<v1::GetChunksResponse> GetChunks(const v1::GetChunksRequest& request,
                                                  const CallOptions& call = {});
  // ChunkDocuments: the chunks ingest would make (for callers that embed).
  absl::StatusOr<v1::ChunkDocumentsResponse> ChunkDocuments(const std::vector<v1::Document>& docs,
                                                            const CallOptions& call = {});

  // --- KV store (KVStoreService) ---
  absl::StatusOr<v1::LookupResponse> Lookup(const std::vector<std::string>& keys,
                                            const CallOptions& call = {});
  absl::StatusOr<std::vector<bool>> Contains(const std::vector<std::string>& keys,
                                             const CallOptions& call = {});
  // GetChunk: the whole chunk (layers verified against their checksums).
  absl::StatusOr<StoredChunk> GetChunk(const std::string& key,
                                       const std::string& model_fingerprint = "",
                                       const CallOptions& call = {});
  // PutChunk: streams header + layers (checksums filled in when zero).
  absl::StatusOr<v1::PutChunkResponse> PutChunk(const StoredChunk& chunk,
                                                const CallOptions& call = {});
  absl::StatusOr<v1::DeleteChunksResponse> DeleteChunks(const std::vector<std::string>& keys,
                                                        const CallOptions& call = {});
  absl::StatusOr<v1::StoreStats> GetStats(const CallOptions& call = {});

  // --- precompute (PrecomputeService) ---
  absl::StatusOr<v1::Job> StartJob(const v1::StartJobRequest& request,
                                   const CallOptions& call = {});
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id, const CallOptions& call = {});
  // WatchJob: calls on_update for every state until a terminal one (returned)
  // or until on_update returns false (then Cancelled).
  absl::StatusOr<v1::Job> WatchJob(const std::string& job_id,
                                   const std::function<bool(const v1::Job&)>& on_update,
                                   uint32_t interval_ms = 500, const CallOptions& call = {});
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const CallOptions& call = {});

  // --- blend (BlendService) ---
  // Blend / RetrieveAndBlend: stream the fused KV into `sink`. An error from
  // the sink cancels the call and is returned.
  absl::Status Blend(const v1::BlendRequest& request, KVSink* sink, const CallOptions& call = {});
  absl::Status RetrieveAndBlend(const v1::RetrieveAndBlendRequest& request, KVSink* sink,
                                const CallOptions& call = {});

  // --- reference engine (EngineService) ---
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request,
                                                const CallOptions& call = {});

  // --- gRPC health (grpc.health.v1) ---
  // HealthCheck: OK when `service` ("" = whole server) is SERVING.
  absl::Status HealthCheck(const std::string& service = "", const CallOptions& call = {});

  const ClientOptions& options() const { return options_; }


 private:
  struct Stubs;
  explicit Client(ClientOptions options);

  ClientOptions options_;
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace ragkv

#endif  // RAGKV_CONNECTOR_CLIENT_H_
