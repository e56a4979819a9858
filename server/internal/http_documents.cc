// The HTTP API's catalogue routes (docs/protocol.md "HTTP API"):
//   POST /v1/documents          ingest {"documents": [{"id", "text", "title"}]}
//   DELETE /v1/documents/{id}   delete a document and its chunks' stored KV
//   POST /v1/cache/forget       delete the stored KV a chat request's
//                               documents and passages were keyed under
// and the resolution of `documents: [{"id"}]` before a chat is templated.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/internal/http_impl.h"

namespace ragkv::server {
namespace {

using json = nlohmann::json;

// FromStatus: a backend (sidecar) error as an OpenAI error.
ApiError FromStatus(const absl::Status& s, const std::string& param = "") {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return Error(400, std::string(s.message()), "invalid_request_error", "", param);
    case absl::StatusCode::kNotFound:
      return Error(404, std::string(s.message()), "invalid_request_error", "not_found", param);
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
      return Error(503, std::string(s.message()), "server_error", "unavailable", param);
    default:
      return Error(500, std::string(s.message()), "server_error", "", param);
  }
}

}  // namespace

bool HttpServer::Impl::ResolveDocuments(GenerationRequest* r, ApiError* error) const {
  std::vector<Document> out;
  for (size_t i = 0; i < r->documents.size(); ++i) {
    Document& d = r->documents[i];
    if (!d.by_id()) {
      out.push_back(std::move(d));
      continue;
    }
    const std::string param = absl::StrCat("documents[", i, "].id");
    DocumentBackend* backend = documents.load();
    if (backend == nullptr) {
      *error = BadRequest("documents by id need the sidecar's catalogue", param);
      return false;
    }
    absl::StatusOr<std::vector<Document>> chunks = backend->Resolve(d);
    if (!chunks.ok()) {
      *error = FromStatus(chunks.status(), param);
      if (error->status == 404) *error = BadRequest(error->message, param, "document_not_found");
      return false;
    }
    for (Document& c : *chunks) out.push_back(std::move(c));
    if (out.size() > kMaxResolvedDocuments) {
      *error = BadRequest(absl::StrCat("the documents resolve to over ", kMaxResolvedDocuments,
                                       " chunks"),
                          "documents");
      return false;
    }
  }
  r->documents = std::move(out);
  return true;
}

bool HttpServer::Impl::Retrieve(GenerationRequest* r, ApiError* error, Timing* timing) const {
  const int k = r->ragkv.k >= 0 ? r->ragkv.k : o.retrieval_k;
  if (k <= 0) return true;
  const auto user = std::find_if(r->messages.rbegin(), r->messages.rend(),
                                 [](const ChatMessage& m) { return m.role == "user"; });
  if (user == r->messages.rend() || user->content.empty()) {
    *error = BadRequest("server-side retrieval searches with the last user message; there is none",
                        "ragkv.k");
    return false;
  }
  DocumentBackend* backend = documents.load();
  if (backend == nullptr) {
    *error = BadRequest("server-side retrieval needs the sidecar's catalogue", "ragkv.k");
    return false;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<Document>> hits = backend->Search(user->content, k);
  if (!hits.ok()) {
    *error = FromStatus(hits.status(), "ragkv.k");
    return false;
  }
  if (r->documents.size() + hits->size() > kMaxResolvedDocuments) {
    *error = BadRequest(absl::StrCat("the documents and the retrieved chunks are over ",
                                     kMaxResolvedDocuments),
                        "ragkv.k");
    return false;
  }
  for (Document& d : *hits) r->documents.push_back(std::move(d));
  timing->retrieve_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  timing->retrieved_chunks = static_cast<int>(hits->size());
  return true;
}

void HttpServer::Impl::DocumentRoutes() {
  auto backend = [this](httplib::Response& res) -> DocumentBackend* {
    DocumentBackend* b = documents.load();
    if (b == nullptr || draining.load()) {
      Reply(res, Error(503, b == nullptr ? "the catalogue is loading" : "the server is shutting down",
                       "server_error", "unavailable"));
    }
    return draining.load() ? nullptr : b;
  };
  http.Post("/v1/documents", [this, backend](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    DocumentBackend* b = backend(res);
    if (b == nullptr) return;
    std::vector<Document> docs;
    ApiError err;
    if (!ParseIngestRequest(req.body, &docs, &err)) return Reply(res, err);
    absl::StatusOr<std::vector<Ingested>> got = b->Ingest(docs);
    if (!got.ok()) return Reply(res, FromStatus(got.status(), "documents"));
    json data = json::array();
    for (const Ingested& i : *got) {
      data.push_back({{"id", i.doc_id}, {"object", "document"}, {"chunk_ids", i.chunk_ids}});
    }
    res.set_content(json({{"object", "list"}, {"data", data}}).dump(), "application/json");
  });
  http.Delete(R"(/v1/documents/([^/]+))", [this, backend](const httplib::Request& req,
                                                           httplib::Response& res) {
    if (!Authorized(req, res)) return;
    DocumentBackend* b = backend(res);
    if (b == nullptr) return;
    const std::string id = req.matches[1];
    absl::StatusOr<int> n = b->Delete(id);
    if (!n.ok()) return Reply(res, FromStatus(n.status()));
    res.set_content(json({{"id", id}, {"object", "document"}, {"deleted", true},
                          {"chunks_deleted", *n}})
                        .dump(),
                    "application/json");
  });
  http.Post("/v1/cache/forget", [this, backend](const httplib::Request& req,
                                                httplib::Response& res) {
    if (!Authorized(req, res)) return;
    DocumentBackend* b = backend(res);
    const PromptBuilder* pb = prompts.load();
    if (b == nullptr || pb == nullptr) return;
    GenerationRequest r;
    ApiError err;
    if (!ParseChatRequest(req.body, &r, &err) || !ResolveDocuments(&r, &err)) return Reply(res, err);
    absl::StatusOr<BuiltPrompt> p = pb->Chat(r.messages, r.documents);
    if (!p.ok()) return Reply(res, BadRequest(std::string(p.status().message()), "messages"));
    std::vector<std::vector<int32_t>> spans;
    auto add = [&](std::pair<size_t, size_t> rows) {
      spans.emplace_back(p->tokens.begin() + rows.first, p->tokens.begin() + rows.second);
    };
    for (size_t i = 0; i < p->documents.size(); ++i) {
      // A catalogue chunk named by id is the operator's, shared: not forgotten here.
      if (i >= p->document_chunks.size() || !p->document_chunks[i]) add(p->documents[i]);
    }
    for (const auto& rows : p->passages) add(rows);
    absl::StatusOr<int> n = b->Forget(spans, r.cache_salt);
    if (!n.ok()) return Reply(res, FromStatus(n.status()));
    res.set_content(json({{"object", "cache.forget"}, {"spans", spans.size()}, {"deleted", *n}}).dump(),
                    "application/json");
  });
}

}  // namespace ragkv::server
