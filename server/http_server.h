// http_server.h: HttpServer, the OpenAI-compatible HTTP front end of
// `ragkv serve --engine llama.cpp` (docs/protocol.md "HTTP API"):
//   POST /v1/chat/completions, POST /v1/completions (JSON or SSE streams
//   ending with `data: [DONE]`), GET /v1/models, GET /health.
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
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace ragkv::server {

class Scheduler;
class PromptBuilder;

class HttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 8080;           // 0: any free port (read it back with port())
    std::string model_id;      // the served model's id (--alias, default the file's name)
    std::string auth_token;    // when set: "Authorization: Bearer <token>" on /v1/*
    int threads = 16;          // HTTP worker threads (connections served at once)
  };
  // Start: binds and serves (loading). Unavailable when the address is taken.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Options options);
  ~HttpServer();

  // SetReady: serving from now on (not owned; both outlive Stop).
  void SetReady(Scheduler* scheduler, const PromptBuilder* prompts, int n_vocab);
  // SetDraining: /health and new requests answer 503 (in-flight ones finish).
  void SetDraining();
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
