// http_server.h: HttpServer, the OpenAI-compatible HTTP front end of
// `ragkv serve --engine llama.cpp` (docs/protocol.md "HTTP API"):
//   POST /v1/chat/completions, POST /v1/completions (JSON or SSE streams
//   ending with `data: [DONE]`), GET /v1/models, GET /health, GET /metrics,
//   POST /v1/documents, DELETE /v1/documents/{id}, POST /v1/cache/forget.
// It binds first and answers /health 503 (and every API call 503) until
// SetReady hands it the scheduler and the prompt builder; Stop stops
// accepting and closes the listener.
//
// Never crashes or wedges on input: a body is parsed and validated
// (server/api.h) before anything reaches the scheduler; errors are
// OpenAI-shaped; a full queue answers 429; a streaming client that goes
// away cancels its job (its slot is freed before the next decode step).
// Thread safety: all methods are thread-safe.
#ifndef RAGKV_SERVER_HTTP_SERVER_H_
#define RAGKV_SERVER_HTTP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ragkv::server {

class Scheduler;
class PromptBuilder;
class DocumentBackend;

class HttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 8080;           // 0: any free port (read it back with port())
    std::string model_id;      // the served model's id (--alias, default the file's name)
    std::string auth_token;    // when set: "Authorization: Bearer <token>" on /v1/*
    // HTTP workers: `threads` always, more on demand up to `max_threads`
    // (a connection holds one from accept to close, idle keep-alive time
    // included; past max_threads new connections wait for one to close).
    int threads = 16;
    int max_threads = 1024;
    // keep_alive_s: how long an idle kept-alive connection stays open.
    int keep_alive_s = 5;
    // request_timeout: arrival to the last token; past it the request ends
    // with an error (504, or an error event in a stream) and frees its slot.
    absl::Duration request_timeout = absl::InfiniteDuration();
    // retrieval_k: server-side retrieval for requests without `ragkv.k`:
    // the top-k catalogue chunks for the last user message go in as
    // documents (0: off).
    int retrieval_k = 0;
    // adaptive_budget: the budget rule's mean ratio for requests that set
    // no ratio and no adaptive field (--adaptive-budget; 0: off, the
    // sidecar's fixed ratio).
    double adaptive_budget = 0;
    // reorder_documents: the exact-prefix reorder pass (server/reorder.h)
    // for chat requests with documents that do not set `ragkv.reorder`
    // (--reorder-documents; off: the retriever's order is kept). It looks
    // up the sidecar's prefix blocks as the sidecar stores them:
    // prefix_block_tokens, up to prefix_max_tokens (the sidecar's
    // --prefix-block-tokens, --prefix-cache-max-tokens); prefix_cache
    // false (the sidecar's --prefix-cache false): the pass never runs.
    bool reorder_documents = false;
    bool prefix_cache = true;
    int prefix_block_tokens = 16;
    int64_t prefix_max_tokens = 4096;
    // tls_cert_file / tls_key_file (PEM): both set, the port speaks HTTPS
    // only (`ragkv serve --tls-cert/--tls-key`, as the sidecar's gRPC).
    std::string tls_cert_file, tls_key_file;
    // more_metrics: appended to GET /metrics (the in-process sidecar's
    // histograms and counters); null: nothing.
    std::function<std::string()> more_metrics;
  };
  // Start: binds and serves (loading). Unavailable when the address is taken.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Options options);
  ~HttpServer();

  // SetReady: serving from now on (not owned; all outlive Stop).
  // `documents`: the catalogue (documents by id, /v1/documents,
  // /v1/cache/forget); null: those answer an error.
  void SetReady(Scheduler* scheduler, const PromptBuilder* prompts, int n_vocab,
                DocumentBackend* documents = nullptr);
  // SetDraining: /health and new requests answer 503 (in-flight ones finish).
  void SetDraining();
  // WaitForResponses: waits up to `max` until every request being served
  // has written its response (a stream its end, [DONE]) or lost its
  // client: Stop ends the streams still writing, so a drain calls this
  // first, once the scheduler's jobs have finished.
  void WaitForResponses(absl::Duration max);
  // Stop: stops accepting, lets the responses being written finish (up to
  // 10 s), then ends the connections left (idle kept-alive ones).
  void Stop();
  int port() const { return port_; }

  struct Impl;

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace ragkv::server

#endif  // RAGKV_SERVER_HTTP_SERVER_H_
