#include "server/documents.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "connector/client.h"

namespace ragkv::server {

absl::StatusOr<std::vector<Document>> SidecarDocuments::Resolve(const Document& d) {
  v1::GetChunksRequest req;
  if (d.chunk_id.has_value()) {
    req.add_chunk_ids(*d.chunk_id);
  } else {
    req.add_doc_ids(d.doc_id);
  }
  ASSIGN_OR_RETURN(v1::GetChunksResponse resp, client_->GetChunks(req));
  std::vector<Document> out;
  for (const v1::ChunkInfo& c : resp.chunks()) {
    Document& r = out.emplace_back();
    r.text = c.text();
    r.chunk_id = c.chunk_id();
  }
  if (out.empty()) return absl::NotFoundError(absl::StrCat("document ", d.doc_id, " has no chunks"));
  return out;
}

absl::StatusOr<std::vector<Document>> SidecarDocuments::Search(const std::string& query, int k) {
  v1::SearchRequest req;
  req.set_text(query);
  req.set_k(static_cast<uint32_t>(k));
  req.set_include_content(true);
  ASSIGN_OR_RETURN(v1::SearchResponse resp, client_->Search(req));
  std::vector<Document> out;
  for (const v1::SearchHit& h : resp.hits()) {
    Document& r = out.emplace_back();
    r.text = h.chunk().text();
    r.chunk_id = h.chunk().chunk_id();
  }
  return out;
}

absl::StatusOr<std::vector<Ingested>> SidecarDocuments::Ingest(const std::vector<Document>& docs) {
  std::vector<v1::Document> wire;
  for (const Document& d : docs) {
    v1::Document& w = wire.emplace_back();
    w.set_doc_id(d.doc_id);
    // The catalogue has no title field: the title line leads the text, as
    // in the prompt's documents layout.
    w.set_text(d.title.empty() ? d.text : absl::StrCat(d.title, "\n", d.text));
    w.set_source("http");
  }
  ASSIGN_OR_RETURN(v1::IngestDocumentsResponse resp, client_->IngestDocuments(wire));
  std::vector<Ingested> out;
  for (const v1::IngestedDocument& i : resp.ingested()) {
    out.push_back({i.doc_id(), {i.chunk_ids().begin(), i.chunk_ids().end()}});
  }
  return out;
}

absl::StatusOr<int> SidecarDocuments::Delete(const std::string& doc_id) {
  v1::GetChunksRequest req;
  req.add_doc_ids(doc_id);
  ASSIGN_OR_RETURN(v1::GetChunksResponse chunks, client_->GetChunks(req));
  ASSIGN_OR_RETURN(v1::DeleteDocumentResponse resp, client_->DeleteDocument(doc_id));
  std::vector<std::string> keys;
  for (const v1::ChunkInfo& c : chunks.chunks()) keys.push_back(c.kv_key());
  if (!keys.empty()) RETURN_IF_ERROR(client_->DeleteChunks(keys).status());
  return static_cast<int>(resp.chunks_deleted());
}

absl::StatusOr<int> SidecarDocuments::Forget(const std::vector<std::vector<int32_t>>& spans,
                                             const std::string& salt) {
  if (spans.empty()) return 0;
  const kvstore::Fingerprint fp = kvstore::SaltedFingerprint(fp_, salt);
  std::vector<std::string> keys;
  for (const std::vector<int32_t>& t : spans) {
    keys.emplace_back(kvstore::ChunkKey::Of(fp, t).AsBytes());
  }
  ASSIGN_OR_RETURN(v1::DeleteChunksResponse resp, client_->DeleteChunks(keys));
  return static_cast<int>(resp.deleted());
}

absl::StatusOr<std::vector<bool>> SidecarDocuments::Stored(
    const std::vector<kvstore::ChunkKey>& keys) {
  std::vector<std::string> raw;
  raw.reserve(keys.size());
  for (const kvstore::ChunkKey& k : keys) raw.emplace_back(k.AsBytes());
  return client_->Contains(raw);
}

}  // namespace ragkv::server
