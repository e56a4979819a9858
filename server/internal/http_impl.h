// http_impl.h: HttpServer's state and handlers, shared by
// server/http_server.cc (the generation routes) and
// server/internal/http_documents.cc (the catalogue's routes). Private to
// server/.
#ifndef RAGKV_SERVER_INTERNAL_HTTP_IMPL_H_
#define RAGKV_SERVER_INTERNAL_HTTP_IMPL_H_

#include <httplib.h>

#include <atomic>
#include <ctime>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "server/api.h"
#include "server/documents.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/prompt.h"
#include "server/scheduler.h"

namespace ragkv::server {

struct HttpServer::Impl {
  explicit Impl(Options options);
  Options o;
  std::unique_ptr<httplib::Server> server;  // an httplib::SSLServer with TLS files
  httplib::Server& http;
  std::atomic<Scheduler*> scheduler{nullptr};
  std::atomic<const PromptBuilder*> prompts{nullptr};
  std::atomic<int> n_vocab{0};
  std::atomic<bool> draining{false};
  // handling: requests from routing until their response is written, a
  // stream's last event included (the logger runs after the write):
  // WaitForResponses.
  std::atomic<int> handling{0};
  int64_t created = std::time(nullptr);
  std::atomic<uint64_t> seq{0};
  uint64_t nonce = std::random_device{}();
  HttpMetrics metrics;

  void Routes();
  void Generate(const httplib::Request& req, httplib::Response& res, bool chat);
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  std::string NewId(bool chat) {
    return absl::StrFormat("%s-%016x%08x", chat ? "chatcmpl" : "cmpl", nonce, seq.fetch_add(1));
  }
  void Stream(httplib::Response& res, std::shared_ptr<Job> job, bool chat, bool include_usage);
  // The catalogue's routes (http_documents.cc): POST /v1/documents,
  // DELETE /v1/documents/{id}, POST /v1/cache/forget; and the resolution
  // of a request's documents named by id (false: *error set).
  std::atomic<DocumentBackend*> documents{nullptr};
  void DocumentRoutes();
  bool ResolveDocuments(GenerationRequest* r, ApiError* error) const;
  // Retrieve: server-side retrieval (ragkv.k, else --retrieval-k): the
  // catalogue's top-k chunks for the last user message appended to the
  // documents; the time and count into *timing.
  bool Retrieve(GenerationRequest* r, ApiError* error, Timing* timing) const;
  // Reorder: the exact-prefix reorder pass (http_reorder.cc) on a chat's
  // resolved documents when the request or --reorder-documents asks for
  // it; what it did into *timing and the metrics. Never refuses a request:
  // a failed lookup keeps the retriever's order (counted as an error).
  void Reorder(GenerationRequest* r, const PromptBuilder& prompts, Timing* timing);
};

inline void Reply(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(ErrorJson(e), "application/json");
}

inline ApiError Error(int status, std::string message, std::string type, std::string code = "",
               std::string param = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}


}  // namespace ragkv::server

#endif  // RAGKV_SERVER_INTERNAL_HTTP_IMPL_H_
