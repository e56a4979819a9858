#include "services/retrieval_service.h"

#include <malloc.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "kvstore/chunk_key.h"
#include "model/model.h"
#include "retrieval/retriever.h"
#include "services/internal/grpc_util.h"
#include "services/internal/validate.h"
#include "services/limits.h"

namespace ragkv::services {
namespace {

using internal::RunUnary;

absl::Status NeedRetriever(const ServiceContext* ctx) {
  if (ctx->retriever == nullptr) {
    return absl::FailedPreconditionError("this server has no retrieval service");
  }
  return absl::OkStatus();
}

std::string KvKeyOf(const ServiceContext* ctx, const std::vector<int32_t>& tokens) {
  if (ctx->model == nullptr || tokens.empty()) return "";
  return std::string(kvstore::ChunkKey::Of(ctx->model->fingerprint(), tokens).AsBytes());
}

// ReturnFreedMemory: after a large ingest or delete (its transient vectors,
// batches and memtables run to ~100x the text), hands the freed heap back to
// the OS; glibc keeps it otherwise, and RSS stays at the peak.
void ReturnFreedMemory(size_t text_bytes) {
#ifdef __GLIBC__
  if (text_bytes >= (size_t{1} << 20)) ::malloc_trim(0);
#endif
}

struct IngestState {
  std::vector<retrieval::Document> docs;
  // vectors[i]: docs[i]'s chunk_vectors, concatenated (empty: none sent).
  std::vector<std::vector<float>> vectors;
  // ids: the doc_ids in `docs`, for the duplicate check. Copies, not views:
  // moving a short (SSO) id as `docs` grows moves its characters.
  absl::flat_hash_set<std::string> ids;
  size_t bytes = 0;
};

// DocumentOf: the retrieval document of a wire document (its source is the
// title, as every caller of the retriever indexes it).
retrieval::Document DocumentOf(const v1::Document& d) {
  retrieval::Document doc;
  doc.id = d.doc_id();
  doc.title = d.source();
  doc.text = d.text();
  return doc;
}

// CheckChunkVectors: a document carries chunk vectors exactly when the
// server's embedder takes the caller's, each of the index's dimension (their
// count is checked against the chunking by the retriever).
absl::Status CheckChunkVectors(const v1::Document& d, const retrieval::Embedder& embedder) {
  const bool sent = d.chunk_vectors_size() > 0;
  if (embedder.embeds_text() && sent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "document ", internal::Quoted(d.doc_id()), " carries chunk_vectors, but this server "
        "embeds text itself (embedder '", embedder.Fingerprint(), "'); send the text alone"));
  }
  if (!embedder.embeds_text() && !sent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "document ", internal::Quoted(d.doc_id()), " has no chunk_vectors; this server's "
        "embedder '", embedder.Fingerprint(), "' takes the caller's: one vector of dim ",
        embedder.dim(), " per chunk of ChunkDocuments"));
  }
  for (int i = 0; i < d.chunk_vectors_size(); ++i) {
    if (d.chunk_vectors(i).values_size() != embedder.dim()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "document %s: chunk_vectors[%d] has %d values, the index dim is %d",
          internal::Quoted(d.doc_id()), i, d.chunk_vectors(i).values_size(), embedder.dim()));
    }
  }
  return absl::OkStatus();
}

size_t VectorBytes(const v1::Document& d) {
  size_t n = 0;
  for (const v1::FloatVector& v : d.chunk_vectors()) n += v.values_size() * sizeof(float);
  return n;
}

// SearchModeOf: the mode a request is searched with (SEARCH_MODE_SERVER: the
// server's --search-mode). A query vector is searched dense; a text query on
// a server whose embedder takes the caller's vectors cannot be embedded, so
// only the lexical modes serve it. Any other combination is refused by name.
absl::StatusOr<retrieval::SearchMode> SearchModeOf(const v1::SearchRequest& req,
                                                   const ServiceContext& ctx) {
  const v1::SearchMode mode = req.mode();
  if (!v1::SearchMode_IsValid(mode)) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown search mode %d", mode));
  }
  if (req.has_vector()) {
    if (mode == v1::SEARCH_MODE_SERVER || mode == v1::SEARCH_MODE_DENSE) {
      return retrieval::SearchMode::kDense;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "a query vector is searched with SEARCH_MODE_SERVER or SEARCH_MODE_DENSE only; ",
        v1::SearchMode_Name(mode), " needs a text query"));
  }
  const bool embeds = ctx.retriever->embedder().embeds_text();
  switch (mode) {
    case v1::SEARCH_MODE_SERVER: return ctx.search_mode;
    case v1::SEARCH_MODE_BM25: return retrieval::SearchMode::kBm25;
    case v1::SEARCH_MODE_LEXICAL: return retrieval::SearchMode::kLexical;
    case v1::SEARCH_MODE_DENSE:
    case v1::SEARCH_MODE_HYBRID:
      if (!embeds) {
        return absl::InvalidArgumentError(absl::StrCat(
            v1::SearchMode_Name(mode), " needs the query embedded, but this server's embedder '",
            ctx.retriever->embedder().Fingerprint(), "' takes the caller's vectors: send "
            "SearchRequest.vector, or search the text with SEARCH_MODE_BM25 or SEARCH_MODE_LEXICAL"));
      }
      return mode == v1::SEARCH_MODE_DENSE ? retrieval::SearchMode::kDense
                                           : retrieval::SearchMode::kHybrid;
    default:
      return absl::InvalidArgumentError(absl::StrFormat("unknown search mode %d", mode));
  }
}

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* RetrievalServiceImpl::IngestDocuments(
    grpc::CallbackServerContext* c, grpc::ByteBuffer* wire_resp) {
  auto state = std::make_shared<IngestState>();
  auto resp = std::make_shared<v1::IngestDocumentsResponse>();
  auto on_message = [this, state](v1::IngestDocumentsRequest&& req) -> absl::Status {
    RETURN_IF_ERROR(internal::ValidateIngestDocument(req));
    RETURN_IF_ERROR(NeedRetriever(ctx_));
    const v1::Document& d = req.document();
    RETURN_IF_ERROR(CheckChunkVectors(d, ctx_->retriever->embedder()));
    state->bytes += d.text().size() + VectorBytes(d);
    if (state->ids.contains(d.doc_id())) {
      return absl::InvalidArgumentError("document " + internal::Quoted(d.doc_id()) +
                                        " appears twice in one stream");
    }
    if (state->docs.size() >= kMaxIngestDocs || state->bytes > kMaxIngestTextBytes) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("ingest stream over %d documents or %d bytes; split it",
                          kMaxIngestDocs, kMaxIngestTextBytes));
    }
    retrieval::Document doc = DocumentOf(d);
    std::vector<float> vectors;
    vectors.reserve(VectorBytes(d) / sizeof(float));
    for (const v1::FloatVector& v : d.chunk_vectors()) {
      vectors.insert(vectors.end(), v.values().begin(), v.values().end());
    }
    state->ids.insert(doc.id);
    state->docs.push_back(std::move(doc));
    state->vectors.push_back(std::move(vectors));
    return absl::OkStatus();
  };
  auto on_end = [this, state, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedRetriever(ctx_));
    if (state->docs.empty()) return absl::InvalidArgumentError("no documents in the stream");
    const bool caller_vectors = !ctx_->retriever->embedder().embeds_text();
    // Re-ingesting a doc_id replaces it, atomically with the rest.
    absl::StatusOr<retrieval::IngestStats> ingested = ctx_->retriever->Upsert(
        absl::MakeConstSpan(state->docs),
        caller_vectors ? absl::MakeConstSpan(state->vectors) : absl::Span<const std::vector<float>>());
    ReturnFreedMemory(state->bytes);
    if (!ingested.ok()) return ingested.status();
    const retrieval::IngestStats& st = *ingested;
    resp->set_documents(static_cast<uint32_t>(st.documents));
    resp->set_chunks(static_cast<uint32_t>(st.chunks));
    uint64_t tokens = 0;
    for (const auto& d : state->docs) {
      ASSIGN_OR_RETURN(auto rec, ctx_->retriever->GetDocument(d.id));
      if (!rec) continue;
      v1::IngestedDocument* out = resp->add_ingested();
      out->set_doc_id(d.id);
      for (int64_t id : rec->chunk_ids) {
        out->add_chunk_ids(static_cast<uint64_t>(id));
        ASSIGN_OR_RETURN(auto ch, ctx_->retriever->GetChunk(id));
        if (ch) tokens += ch->token_ids.size();
      }
    }
    resp->set_tokens(tokens);
    ctx_->metrics->Add("ragkv_ingested_documents_total", "", static_cast<double>(st.documents));
    ctx_->metrics->Add("ragkv_ingested_chunks_total", "", static_cast<double>(st.chunks));
    return absl::OkStatus();
  };
  return new internal::CollectReader<v1::IngestDocumentsRequest, v1::IngestDocumentsResponse>(
      c, wire_resp, resp, ctx_->executor, ctx_->gate, std::move(on_message), std::move(on_end));
}

grpc::ServerUnaryReactor* RetrievalServiceImpl::DeleteDocument(
    grpc::CallbackServerContext* c, const v1::DeleteDocumentRequest* req,
    v1::DeleteDocumentResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(internal::ValidateDeleteDocumentRequest(*req));
    RETURN_IF_ERROR(NeedRetriever(ctx_));
    ASSIGN_OR_RETURN(auto rec, ctx_->retriever->GetDocument(req->doc_id()));
    if (!rec) return absl::NotFoundError("unknown document " + internal::Quoted(req->doc_id()));
    RETURN_IF_ERROR(ctx_->retriever->Delete(req->doc_id()));
    ReturnFreedMemory(rec->text_bytes);
    resp->set_chunks_deleted(static_cast<uint32_t>(rec->chunk_ids.size()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RetrievalServiceImpl::Search(grpc::CallbackServerContext* c,
                                                       const v1::SearchRequest* req,
                                                       v1::SearchResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(internal::ValidateSearchRequest(*req));
    RETURN_IF_ERROR(NeedRetriever(ctx_));
    retrieval::SearchOptions so;
    so.k = static_cast<int>(req->k());
    so.with_text = req->include_content();
    so.with_tokens = true;  // needed for the KV key
    ASSIGN_OR_RETURN(so.mode, SearchModeOf(*req, *ctx_));
    const auto t0 = Clock::now();
    absl::StatusOr<std::vector<retrieval::SearchResult>> hits;
    if (req->has_vector()) {
      if (req->vector().values_size() != ctx_->retriever->embedder().dim()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("query vector has %d values, the index dim is %d",
                            req->vector().values_size(), ctx_->retriever->embedder().dim()));
      }
      hits = ctx_->retriever->SearchByVector(
          absl::MakeConstSpan(req->vector().values().data(), req->vector().values_size()), so);
    } else {
      hits = ctx_->retriever->Search(req->text(), so);  // non-empty (validated)
    }
    if (!hits.ok()) return hits.status();
    const double ms = MsSince(t0);
    for (auto& h : *hits) {
      v1::SearchHit* out = resp->add_hits();
      out->set_score(h.score);
      v1::ChunkInfo* ci = out->mutable_chunk();
      ci->set_chunk_id(static_cast<uint64_t>(h.chunk_id));
      ci->set_doc_id(h.doc_id);
      ci->set_ordinal(static_cast<uint32_t>(h.ordinal));
      ci->set_kv_key(KvKeyOf(ctx_, h.token_ids));
      if (req->include_content()) {
        ci->set_text(std::move(h.text));
        ci->mutable_token_ids()->Assign(h.token_ids.begin(), h.token_ids.end());
      }
    }
    v1::StageTiming* t = resp->add_timings();
    t->set_stage("search");
    t->set_ms(ms);
    ctx_->metrics->Observe("ragkv_stage_ms", "stage=\"retrieve\"", ms);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RetrievalServiceImpl::GetChunks(grpc::CallbackServerContext* c,
                                                          const v1::GetChunksRequest* req,
                                                          v1::GetChunksResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(internal::ValidateGetChunksRequest(*req));
    RETURN_IF_ERROR(NeedRetriever(ctx_));
    auto add = [&](uint64_t id) -> absl::Status {
      ASSIGN_OR_RETURN(auto ch, ctx_->retriever->GetChunk(static_cast<int64_t>(id)));
      if (!ch) return absl::NotFoundError(absl::StrFormat("unknown chunk id %d", id));
      v1::ChunkInfo* ci = resp->add_chunks();
      ci->set_chunk_id(id);
      ci->set_doc_id(ch->doc_id);
      ci->set_ordinal(static_cast<uint32_t>(ch->ordinal));
      ci->set_text(ch->text);
      ci->mutable_token_ids()->Assign(ch->token_ids.begin(), ch->token_ids.end());
      ci->set_kv_key(KvKeyOf(ctx_, ch->token_ids));
      return absl::OkStatus();
    };
    for (uint64_t id : req->chunk_ids()) RETURN_IF_ERROR(add(id));
    for (const std::string& doc : req->doc_ids()) {
      ASSIGN_OR_RETURN(auto d, ctx_->retriever->GetDocument(doc));
      if (!d) return absl::NotFoundError("unknown document id " + doc);
      for (int64_t id : d->chunk_ids) RETURN_IF_ERROR(add(static_cast<uint64_t>(id)));
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* RetrievalServiceImpl::ChunkDocuments(
    grpc::CallbackServerContext* c, const v1::ChunkDocumentsRequest* req,
    v1::ChunkDocumentsResponse* resp) {
  return RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(internal::ValidateChunkDocumentsRequest(*req));
    RETURN_IF_ERROR(NeedRetriever(ctx_));
    for (const v1::Document& d : req->documents()) {
      const retrieval::Document doc = DocumentOf(d);
      ASSIGN_OR_RETURN(std::vector<retrieval::ChunkSpan> chunks, ctx_->retriever->ChunkDocument(doc));
      v1::DocumentChunks* out = resp->add_documents();
      out->set_doc_id(d.doc_id());
      for (const retrieval::ChunkSpan& ch : chunks) out->add_texts(retrieval::ChunkIndexText(doc.title, ch.text));
    }
    return absl::OkStatus();
  });
}

}  // namespace ragkv::services
