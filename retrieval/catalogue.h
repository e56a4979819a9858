// catalogue.h: the persistent document/chunk catalogue (RocksDB).
//
// Column families (record formats in docs/retrieval.md, each value starts
// with a format-version byte):
//   docs    : doc id (UTF-8)         -> DocumentRecord
//   chunks  : chunk id (8B big-end.) -> ChunkRecord (token ids, text, spans, kv key)
//   vectors : chunk id (8B big-end.) -> float32[dim] (so the index can be rebuilt)
//   meta    : key                    -> value (fingerprints, next chunk id, generation)
// Every mutation is one atomic WriteBatch across families, so a document is
// either wholly present (record, chunks, vectors) or absent.
//
// Thread safety: all methods are thread-safe (RocksDB is); callers order
// read-modify-write sequences themselves (the Retriever holds its lock).
#ifndef RAGKV_RETRIEVAL_CATALOGUE_H_
#define RAGKV_RETRIEVAL_CATALOGUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ragkv::retrieval {

// ChunkRecord: one chunk, the unit the KV store keys.
struct ChunkRecord {
  int64_t chunk_id = -1;    // FAISS id; unique, never reused in a catalogue
  std::string doc_id;
  int32_t ordinal = 0;      // index within the document
  uint64_t byte_begin = 0;  // span in the document text
  uint64_t byte_end = 0;
  uint64_t token_begin = 0;          // document-level token offset (chunker.h)
  std::vector<int32_t> token_ids;    // what precompute feeds the model
  std::string text;
  // kv_key: the KV-store chunk key, filled by services/ (kvstore computes it
  // from the model fingerprint and token_ids); empty until then.
  std::string kv_key;
};

struct DocumentRecord {
  std::string doc_id;
  std::string title;
  uint64_t text_bytes = 0;
  uint64_t text_hash = 0;  // XXH64 of the text, seed 0
  std::vector<int64_t> chunk_ids;
};

// CatalogueMutation: applied atomically by Catalogue::Apply. Deletions are
// applied before puts.
struct CatalogueMutation {
  std::vector<std::string> delete_documents;
  std::vector<int64_t> delete_chunks;  // also deletes their vectors
  std::vector<DocumentRecord> put_documents;
  std::vector<ChunkRecord> put_chunks;
  // put_vectors: views of the caller's floats (alive until Apply returns),
  // so a large ingest is not copied once more just to be written.
  std::vector<std::pair<int64_t, absl::Span<const float>>> put_vectors;
  std::vector<std::pair<std::string, std::string>> put_meta;
};

struct CatalogueOptions {
  std::string path;               // RocksDB directory (required)
  bool create_if_missing = true;  // default true
  bool sync_writes = true;        // fsync each Apply (default true)
};

class Catalogue {
 public:
  // Open: opens or creates the database. InvalidArgument for an empty path,
  // NotFound when missing and !create_if_missing, Internal/DataLoss from
  // RocksDB. WAL recovery drops only a torn last record (a kill -9 mid-write):
  // damage anywhere else is DataLoss naming the repair path, never a silent
  // loss of later writes.
  static absl::StatusOr<std::unique_ptr<Catalogue>> Open(CatalogueOptions options);
  ~Catalogue();

  // Apply: one atomic write. After a failed write (disk full:
  // RESOURCE_EXHAUSTED) RocksDB refuses writes; the next Apply reopens the
  // database once the disk has room again, so writes resume by themselves.
  absl::Status Apply(const CatalogueMutation& m);

  // DeleteVectors: deletes every vector record of chunk id in [begin, end)
  // (end < 0: no upper bound; one range delete, written only when there is
  // one). An ingest writes a large document's vectors ahead of its atomic
  // Apply, under chunk ids no record references until that Apply also
  // raises the next-id meta; this drops them after a failed or killed
  // ingest. Returns how many it found.
  absl::StatusOr<int64_t> DeleteVectors(int64_t begin, int64_t end);

  // Repair: RocksDB's RepairDB on a damaged catalogue at `path` (not open):
  // salvages every record it can read; what it cannot is lost (compare the
  // document count before and after).
  static absl::Status Repair(const std::string& path);

  // Getters: nullopt when absent; DataLoss for an undecodable record.
  absl::StatusOr<std::optional<DocumentRecord>> GetDocument(const std::string& doc_id) const;
  absl::StatusOr<std::optional<ChunkRecord>> GetChunk(int64_t chunk_id) const;
  absl::StatusOr<std::optional<std::vector<float>>> GetVector(int64_t chunk_id) const;
  absl::StatusOr<std::optional<std::string>> GetMeta(const std::string& key) const;

  // Scans in key order (a consistent snapshot). A non-OK status from `fn`
  // stops the scan and is returned.
  absl::Status ForEachDocument(const std::function<absl::Status(const DocumentRecord&)>& fn) const;
  absl::Status ForEachChunk(const std::function<absl::Status(const ChunkRecord&)>& fn) const;
  absl::Status ForEachVector(
      const std::function<absl::Status(int64_t, absl::Span<const float>)>& fn) const;

 private:
  struct Impl;
  explicit Catalogue(std::unique_ptr<Impl> impl);
  absl::Status ReopenIfFailed();
  std::unique_ptr<Impl> impl_;
};

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_CATALOGUE_H_
