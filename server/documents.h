// documents.h: what the HTTP API needs of the sidecar's catalogue and KV
// store (docs/protocol.md "HTTP API": documents by id, POST/DELETE
// /v1/documents, POST /v1/cache/forget, server-side retrieval, the reorder pass's prefix lookups), and SidecarDocuments, its
// implementation over the connector (the sidecar's gRPC API).
// Thread safety: SidecarDocuments is thread-safe (the Client is).
#ifndef RAGKV_SERVER_DOCUMENTS_H_
#define RAGKV_SERVER_DOCUMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/chunk_key.h"
#include "server/api.h"

namespace ragkv {
class Client;
}

namespace ragkv::server {

// Ingested: one document as the catalogue chunked it.
struct Ingested {
  std::string doc_id;
  std::vector<uint64_t> chunk_ids;
};

class DocumentBackend {
 public:
  virtual ~DocumentBackend() = default;
  // Resolve: a document named by id (Document::by_id) as its chunks, in
  // order: text and chunk_id set. NOT_FOUND names the id.
  virtual absl::StatusOr<std::vector<Document>> Resolve(const Document& d) = 0;
  // Ingest: documents (doc_id, title, text) into the catalogue (chunked and
  // indexed; a document with an existing id replaces it).
  virtual absl::StatusOr<std::vector<Ingested>> Ingest(const std::vector<Document>& docs) = 0;
  // Delete: the document and the stored KV of its chunks; the chunks deleted.
  virtual absl::StatusOr<int> Delete(const std::string& doc_id) = 0;
  // Search: the catalogue's top-k chunks for `query` (the sidecar's search
  // mode), best first: text and chunk_id set.
  virtual absl::StatusOr<std::vector<Document>> Search(const std::string& query, int k) = 0;
  // Forget: the stored KV records of these token lists (documents or
  // passages as a request keyed them) under `salt`; how many were deleted.
  virtual absl::StatusOr<int> Forget(const std::vector<std::vector<int32_t>>& spans,
                                     const std::string& salt) = 0;
  // Stored: per key, whether the store holds a record under it (presence
  // only, no record read: the reorder pass's lookups of prefix blocks).
  virtual absl::StatusOr<std::vector<bool>> Stored(const std::vector<kvstore::ChunkKey>& keys) = 0;
  // KeyNamespace: the key namespace of a request's own KV under `salt`
  // (kvstore::SaltedFingerprint of the model's fingerprint).
  virtual kvstore::Fingerprint KeyNamespace(const std::string& salt) const = 0;
};

class SidecarDocuments final : public DocumentBackend {
 public:
  // `client` (not owned) reaches the sidecar; `fingerprint` is the model's.
  SidecarDocuments(Client* client, kvstore::Fingerprint fingerprint)
      : client_(client), fp_(fingerprint) {}
  absl::StatusOr<std::vector<Document>> Resolve(const Document& d) override;
  absl::StatusOr<std::vector<Ingested>> Ingest(const std::vector<Document>& docs) override;
  absl::StatusOr<int> Delete(const std::string& doc_id) override;
  absl::StatusOr<std::vector<Document>> Search(const std::string& query, int k) override;
  absl::StatusOr<int> Forget(const std::vector<std::vector<int32_t>>& spans,
                             const std::string& salt) override;
  absl::StatusOr<std::vector<bool>> Stored(const std::vector<kvstore::ChunkKey>& keys) override;
  kvstore::Fingerprint KeyNamespace(const std::string& salt) const override {
    return kvstore::SaltedFingerprint(fp_, salt);
  }

 private:
  Client* client_;
  kvstore::Fingerprint fp_;
};

}  // namespace ragkv::server

#endif  // RAGKV_SERVER_DOCUMENTS_H_
