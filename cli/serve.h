// serve.h: `ragkv serve`'s engine front end (docs/engines.md "The HTTP
// server"). `ragkv serve` alone runs the sidecar; with --engine llama.cpp
// the ragkv binary (which never links llama.cpp) execs `ragkv-llama serve`
// with the same flags, and ragkv-llama runs the same command with a front
// end: the OpenAI-compatible HTTP server and the llama.cpp engine, in the
// sidecar's process.
#ifndef RAGKV_CLI_SERVE_H_
#define RAGKV_CLI_SERVE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cli/command.h"

namespace ragkv::services {
struct SidecarOptions;
class Sidecar;
}  // namespace ragkv::services

namespace ragkv::cli {

// EngineServeFlags: the flags of --engine llama.cpp.
struct EngineServeFlags {
  std::string engine;                  // "" (the sidecar alone) | "llama.cpp"
  std::string http = "127.0.0.1:8080";  // HOST:PORT of the HTTP API (port 0: any)
  int parallel = 1;                    // slots (sequences of one llama_context)
  int ctx_size = 4096;                 // total context cells, split across the slots
  int threads = 2;                     // llama.cpp threads
  int max_queue = 64;                  // requests waiting for a slot; more get 429
  std::string alias;                   // served model id (default: the file's name)
  std::string chat_template;           // "" = the file's own, else chatml
  bool learn = true;                   // --learn-from-traffic: store pasted passages
  double request_timeout_s = 600;      // --request-timeout: a request's deadline (0 = none)
  int retrieval_k = 0;                 // --retrieval-k: server-side retrieval (0 = off)
  double adaptive_budget = 0;          // --adaptive-budget: the budget rule's mean ratio (0 = off)
  int batch_size = 2048;               // --batch-size: tokens per llama_decode (llama-server's -b)
  bool reorder_documents = false;      // --reorder-documents: the exact-prefix reorder pass
  int keep_alive_s = 5;                // --http-keep-alive: an idle connection's life (s)
};

// EngineFrontEnd: what ragkv-llama adds around the sidecar. Bind runs before
// the sidecar starts (the HTTP port answers 503 while loading), Ready after
// it (the engine loads; serving), Drain on SIGTERM/SIGINT before the
// sidecar shuts down (in-flight requests finish).
class EngineFrontEnd {
 public:
  virtual ~EngineFrontEnd() = default;
  // Bind: the HTTP port, with the sidecar's bearer token and TLS files. It
  // clears options->model_path when ragkv must not run the model (a model
  // it refuses to blend: the sidecar then serves without one).
  virtual absl::Status Bind(const EngineServeFlags& flags, services::SidecarOptions* options) = 0;
  virtual std::string http_address() const = 0;
  virtual absl::Status Ready(const services::SidecarOptions& options,
                             services::Sidecar* sidecar) = 0;
  virtual void Drain() = 0;
};
using EngineFrontEndFactory = std::unique_ptr<EngineFrontEnd> (*)();

// NewServeCommandWith: `serve` with a front end for --engine llama.cpp
// (null: --engine llama.cpp execs ragkv-llama, as `ragkv serve` does).
std::unique_ptr<Command> NewServeCommandWith(EngineFrontEndFactory front_end);
// ragkv-llama's `serve`: NewServeCommandWith(the llama.cpp front end), llama_serve.cc.
std::unique_ptr<Command> NewLlamaServeCommand();

}  // namespace ragkv::cli

#endif  // RAGKV_CLI_SERVE_H_
