#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/api.h"
#include "server/internal/http_impl.h"
#include "server/internal/peer.h"
#include "server/internal/thread_pool.h"
#include "server/metrics.h"
#include "server/prompt.h"
#include "server/scheduler.h"

namespace ragkv::server {

bool HttpServer::Impl::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (o.auth_token.empty() || req.get_header_value("Authorization") == "Bearer " + o.auth_token) {
    return true;
  }
  Reply(res, Error(401, "a valid 'Authorization: Bearer <token>' header is required",
                   "invalid_request_error", "invalid_api_key"));
  return false;
}

namespace {
// A worker serves one request at a time: counted from routing to the
// logger, which runs once the response is written (also when the write
// fails; a request refused before routing is never counted).
thread_local bool t_handling = false;
}  // namespace

void HttpServer::Impl::Routes() {
  http.set_payload_max_length(kMaxBodyBytes);
  http.set_pre_routing_handler([this](const httplib::Request&, httplib::Response&) {
    if (!t_handling) t_handling = true, handling.fetch_add(1);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 413) {
      Reply(res, BadRequest(absl::StrCat("the request body is over the limit of ", kMaxBodyBytes,
                                         " bytes"),
                            "", "body_too_large"));
    } else if (res.status == 404) {
      Reply(res, Error(404, "no route " + req.method + " " + req.path, "invalid_request_error",
                       "not_found"));
    } else {
      Reply(res, Error(res.status, "the request failed", "invalid_request_error"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        Reply(res, Error(500, "internal error", "server_error"));
      });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    Scheduler* sched = scheduler.load();
    const bool ok = sched != nullptr && !draining.load();
    res.status = ok ? 200 : 503;
    if (sched == nullptr || !ok) {
      res.set_content(draining.load() ? R"({"status":"draining"})" : R"({"status":"loading"})",
                      "application/json");
      return;
    }
    const Scheduler::Stats st = sched->stats();
    res.set_content(absl::StrFormat(R"({"status":"ok","slots":%d,"active":%d,"queued":%d,)"
                                    R"("done":%d,"cancelled":%d})",
                                    st.parallel, st.active, st.queued, st.done, st.cancelled),
                    "application/json");
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (t_handling) t_handling = false, handling.fetch_sub(1);
    const std::string& p = req.path;
    metrics.Request(p == "/v1/chat/completions" ? "chat"
                    : p == "/v1/completions"    ? "completions"
                    : p == "/v1/models"         ? "models"
                    : p == "/health"            ? "health"
                    : p == "/metrics"           ? "metrics"
                                                : "other",
                    res.status);
  });
  http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    HttpMetrics::Gauges g;
    if (Scheduler* sched = scheduler.load(); sched != nullptr) {
      const Scheduler::Stats st = sched->stats();
      g = {st.parallel, st.active, st.queued};
    }
    std::string text = metrics.Render(g);
    if (o.more_metrics) text += o.more_metrics();
    res.set_content(text, "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    res.set_content(ModelsJson(o.model_id, created), "application/json");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(req, res, true);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(req, res, false);
  });
  DocumentRoutes();
}

void HttpServer::Impl::Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (!Authorized(req, res)) return;
  Scheduler* sched = scheduler.load();
  const PromptBuilder* pb = prompts.load();
  if (sched == nullptr || draining.load()) {
    Reply(res, Error(503, draining.load() ? "the server is shutting down" : "the model is loading",
                     "server_error", "unavailable"));
    return;
  }
  GenerationRequest r;
  ApiError err;
  if (!(chat ? ParseChatRequest(req.body, &r, &err) : ParseCompletionRequest(req.body, &r, &err))) {
    Reply(res, err);
    return;
  }
  if (r.model != o.model_id) {
    Reply(res, Error(404, "The model `" + r.model + "` does not exist (this server serves `" +
                              o.model_id + "`)",
                     "invalid_request_error", "model_not_found", "model"));
    return;
  }
  RagkvOptions& ro = r.ragkv;  // --adaptive-budget for a request that sets no ratio rule
  if (ro.ratio == 0 && ro.adaptive_mass == 0 && ro.adaptive_threshold == 0 &&
      ro.adaptive_budget == 0) {
    ro.adaptive_budget = o.adaptive_budget;
  }
  Timing retrieval;
  if (chat && !(ResolveDocuments(&r, &err) && Retrieve(&r, &err, &retrieval))) {
    Reply(res, err);
    return;
  }
  for (const auto& [id, bias] : r.sampling.logit_bias) {
    if (id >= n_vocab.load()) {
      Reply(res, BadRequest(absl::StrCat("'logit_bias' names token ", id, ", outside the vocabulary of ",
                                         n_vocab.load()),
                            "logit_bias"));
      return;
    }
  }
  if (chat) Reorder(&r, *pb, &retrieval);
  absl::StatusOr<BuiltPrompt> p = chat ? pb->Chat(r.messages, r.documents) : pb->Completion(r);
  const char* field = chat ? "messages" : "prompt";
  if (!p.ok()) {
    Reply(res, BadRequest(std::string(p.status().message()), field));
    return;
  }
  if (p->tokens.empty()) {
    Reply(res, BadRequest("the prompt tokenizes to nothing", field));
    return;
  }
  if (static_cast<int>(p->tokens.size()) >= sched->slot_ctx()) {
    Reply(res, BadRequest(absl::StrFormat("the prompt is %d tokens; a slot's context is %d "
                                          "(--ctx-size / --parallel) and must also hold the output",
                                          p->tokens.size(), sched->slot_ctx()),
                          field, "context_length_exceeded"));
    return;
  }
  auto job = std::make_shared<Job>();
  job->prompt = std::move(p->tokens);
  job->documents = std::move(p->documents);
  job->passages = std::move(p->passages);
  job->cache_salt = r.cache_salt;
  if (o.request_timeout != absl::InfiniteDuration()) {
    job->deadline = job->submitted + absl::ToChronoMilliseconds(o.request_timeout);
  }
  job->sampling = r.sampling;
  job->ragkv = r.ragkv;
  job->info.id = NewId(chat);
  job->info.created = std::time(nullptr);
  job->info.model = o.model_id;
  job->info.return_tokens = r.ragkv.return_tokens;
  job->info.timing.retrieve_ms = retrieval.retrieve_ms;
  job->info.timing.retrieved_chunks = retrieval.retrieved_chunks;
  job->info.timing.reorder_ran = retrieval.reorder_ran;
  job->info.timing.reorder_prefix_before = retrieval.reorder_prefix_before;
  job->info.timing.reorder_prefix_after = retrieval.reorder_prefix_after;
  job->info.timing.document_order = retrieval.document_order;
  switch (sched->Submit(job)) {
    case Scheduler::Admit::kQueueFull:
      Reply(res, Error(429,
                       absl::StrFormat("the server is busy: all %d slots are in use and the "
                                       "queue is full (--max-queue); retry later",
                                       sched->stats().parallel),
                       "requests", "rate_limit_exceeded"));
      return;
    case Scheduler::Admit::kDraining:
      Reply(res, Error(503, "the server is shutting down", "server_error", "unavailable"));
      return;
    case Scheduler::Admit::kQueued:
      break;
  }
  if (r.stream) {
    Stream(res, job, chat, r.include_usage);
    return;
  }
  // The whole answer is written at the end: meanwhile a client that left
  // (closed or reset its connection) cancels its request, as a stream's does.
  const int fd = internal::ConnectionFd(req.remote_addr, req.remote_port, req.local_port);
  std::string text;
  while (!job->Take(&text, absl::Milliseconds(50))) {
    if (internal::PeerClosed(fd)) job->Cancel();
  }
  if (!job->error().empty()) {
    const bool late = job->error() == kDeadlineError;
    Reply(res, Error(late ? 504 : 500, job->error(), late ? "timeout" : "server_error",
                     late ? "deadline_exceeded" : ""));
    return;
  }
  Completion c = job->result();
  metrics.Finished(c);
  res.set_content(chat ? ChatResponseJson(c) : CompletionResponseJson(c), "application/json");
}

void HttpServer::Impl::Stream(httplib::Response& res, std::shared_ptr<Job> job, bool chat,
                              bool include_usage) {
  res.set_header("Cache-Control", "no-cache");
  auto started = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, chat, include_usage, started](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (!*started) {
          *started = true;
          if (chat && !write(ChatChunkSse(job->info, "", true, ""))) {
            job->Cancel();
            return false;
          }
        }
        if (sink.is_writable && !sink.is_writable()) {
          job->Cancel();
          return false;
        }
        std::string piece;
        const bool done = job->Take(&piece, absl::Milliseconds(100));
        if (piece.empty() && !done && !write(": \n\n")) {
          // An SSE comment while nothing else is sent (the Blend stream,
          // the queue): a client that left is seen by the next write, and
          // its request cancelled (within one layer of its blend).
          job->Cancel();
          return false;
        }
        if (!piece.empty()) {
          const std::string chunk =
              chat ? ChatChunkSse(job->info, piece, false, "") : CompletionChunkSse(job->info, piece, "");
          if (!write(chunk)) {
            job->Cancel();
            return false;
          }
        }
        if (!done) return true;
        if (!job->error().empty()) {
          const bool late = job->error() == kDeadlineError;
          write("data: " +
                ErrorJson(Error(late ? 504 : 500, job->error(), late ? "timeout" : "server_error",
                                late ? "deadline_exceeded" : "")) +
                "\n\n");
        } else {
          const Completion& c = job->result();
          metrics.Finished(c);
          write(chat ? ChatChunkSse(c, "", false, c.finish_reason)
                     : CompletionChunkSse(c, "", c.finish_reason));
          if (include_usage) write(UsageChunkSse(c, chat));
        }
        write("data: [DONE]\n\n");
        sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->Cancel();
      });
}

namespace {

std::unique_ptr<httplib::Server> NewServer(const HttpServer::Options& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) return std::make_unique<httplib::Server>();
  return std::make_unique<httplib::SSLServer>(o.tls_cert_file.c_str(), o.tls_key_file.c_str());
}

}  // namespace

HttpServer::Impl::Impl(Options options) : o(std::move(options)), server(NewServer(o)), http(*server) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Options o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("HTTPS needs both --tls-cert and --tls-key");
  }
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->impl_ = std::make_unique<Impl>(std::move(o));
  Impl* impl = s->impl_.get();
  if (!impl->http.is_valid()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "HTTPS: cannot load the certificate %s or the key %s (PEM)", impl->o.tls_cert_file,
        impl->o.tls_key_file));
  }
  impl->Routes();
  // A connection holds its worker until it closes, idle keep-alive time
  // included: more start on demand (internal/thread_pool.h).
  const int threads = std::max(4, impl->o.threads);
  const int max_threads = std::max(threads, impl->o.max_threads);
  impl->http.new_task_queue = [threads, max_threads] {
    return new internal::DynamicThreadPool(threads, max_threads, std::chrono::seconds(1));
  };
  // Default 5 s, llama-server's (cpp-httplib's): an idle pooled connection
  // holds a worker that polls every ~10 ms, so idle ones do not linger.
  impl->http.set_keep_alive_timeout(std::max(1, impl->o.keep_alive_s));
  if (impl->o.port == 0) {
    s->port_ = impl->http.bind_to_any_port(impl->o.host);
  } else if (impl->http.bind_to_port(impl->o.host, impl->o.port)) {
    s->port_ = impl->o.port;
  } else {
    s->port_ = -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s:%d (in use?)", impl->o.host, impl->o.port));
  }
  s->thread_ = std::thread([impl] { impl->http.listen_after_bind(); });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::SetReady(Scheduler* scheduler, const PromptBuilder* prompts, int n_vocab,
                          DocumentBackend* documents) {
  impl_->documents.store(documents);
  impl_->n_vocab.store(n_vocab);
  impl_->prompts.store(prompts);
  impl_->scheduler.store(scheduler);
}

void HttpServer::SetDraining() { impl_->draining.store(true); }

void HttpServer::WaitForResponses(absl::Duration max) {
  const absl::Time deadline = absl::Now() + max;
  while (impl_->handling.load() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
}

void HttpServer::Stop() {
  if (impl_ == nullptr) return;
  impl_->http.stop();
  if (!thread_.joinable()) return;
  // Then idle kept-alive clients (an SDK's connection pool), which would
  // hold the stop for the keep-alive timeout, are disconnected
  // (internal/peer.h).
  WaitForResponses(absl::Seconds(10));
  internal::ShutdownConnections(port_);
  thread_.join();
}

}  // namespace ragkv::server
