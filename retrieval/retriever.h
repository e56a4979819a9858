// retriever.h: the retrieval facade. Ingests documents (validate -> chunk ->
// embed -> FAISS index + RocksDB catalogue), deletes/updates them, and
// searches by query text or vector, returning the chunks' token ids and text.
//
// Persistence: everything lives under options.dir: the catalogue (RocksDB,
// dir/catalogue) is written on every mutation, atomically per call; the
// vector index (dir/index.rkvidx) is written by Save() and by the destructor.
// The catalogue counts mutations (a generation); on open the saved index is
// used only if it was saved at the catalogue's current generation and loads
// cleanly, otherwise it is rebuilt from the vectors stored in the catalogue
// (deterministically, so a restart serves the same results either way).
// The BM25 index (term statistics for the hashed embedder's IDF and for
// hybrid search) is rebuilt from the catalogue's chunk texts on open.
//
// Atomicity: an Ingest/IngestWithVectors/Update/Delete call either applies
// completely or not at all (one RocksDB WriteBatch; the vector index is
// rolled back on failure; search results are always checked against the
// catalogue, so a chunk absent there is never returned).
//
// Thread safety: thread-safe. Searches run concurrently (shared lock);
// mutations are serialized (exclusive lock held only for the commit; chunking
// and embedding run before it).
#ifndef RAGKV_RETRIEVAL_RETRIEVER_H_
#define RAGKV_RETRIEVAL_RETRIEVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "retrieval/bm25.h"
#include "retrieval/catalogue.h"
#include "retrieval/chunk_matcher.h"
#include "retrieval/chunker.h"
#include "retrieval/corpus_reader.h"
#include "retrieval/embedder.h"
#include "retrieval/tokenizer.h"
#include "retrieval/vector_index.h"

namespace ragkv::retrieval {

namespace internal {
class ShingleCache;
}  // namespace internal

enum class SearchMode {
  kDefault,  // RetrieverOptions::hybrid ? kHybrid : kDense
  kDense,    // vector index only
  kBm25,     // BM25 only
  kHybrid,   // reciprocal rank fusion of dense, BM25 and BM25 with feedback
  kLexical,  // reciprocal rank fusion of BM25 and BM25 with feedback (no dense)
};

// The status payload (type URL) of a settings refusal (RetrieverOptions::
// on_setting_change).
inline constexpr char kSettingsRefused[] = "type.ragkv.dev/retrieval.SettingsRefused";

struct RetrieverOptions {
  // Directory for the catalogue and index (created if missing). Required.
  std::string dir;
  // Tokenizer for chunk token ids. Default: ByteTokenizer. services/ passes
  // the model's tokenizer so token ids are what precompute feeds the model.
  std::shared_ptr<const Tokenizer> tokenizer;
  // Embedder. Default: HashedEmbedder with default options.
  std::shared_ptr<const Embedder> embedder;
  ChunkerOptions chunker;
  // Index factory, metric, thread cap and search knobs; dim is taken from the
  // embedder. Default "Flat", inner product, 1 OpenMP thread.
  VectorIndexOptions index;
  // Indexes that need training (IVF, PQ) are trained on all stored vectors
  // once at least this many are stored (default 1000); until then dense
  // search returns FailedPrecondition (BM25 search works).
  int64_t min_train_vectors = 1000;
  // Default search mode (SearchMode::kDefault) is hybrid when true (the
  // default), dense when false. Hybrid fuses by reciprocal rank fusion the
  // dense list, the BM25 list and, unless bm25_feedback is disabled, the
  // list of BM25 with pseudo-relevance feedback (bm25.h). It is what the
  // MuSiQue benchmark measured best (docs/retrieval.md).
  bool hybrid = true;
  // RRF constant: score = sum 1 / (rrf_k + rank), rank from 1. Default 60.
  int rrf_k = 60;
  // Depth of each list fused by RRF (at least k). Default 100.
  int rrf_depth = 100;
  Bm25Params bm25;
  // Pseudo-relevance feedback for the third hybrid list (default 3 feedback
  // chunks, 10 expansion words, weight 0.5; docs = 0 fuses only dense + BM25).
  Bm25Feedback bm25_feedback;
  // Near-duplicate demotion (every search mode): walking the ranked
  // candidates, a chunk whose 5-word-shingle containment
  // (internal::ShingleContainment) with an already returned chunk exceeds
  // this value is set aside, and set-aside chunks fill the list, in rank
  // order, only when fewer than k distinct ones exist. Overlapping windows
  // of one text (sliding-window chunking, re-ingested copies, quoted
  // passages) then take one slot instead of several. Results are still
  // best-first among the distinct ones; a set-aside chunk may follow one
  // with a lower score. 0 = off; must be in [0, 1]. Default 0.7.
  double near_duplicate_containment = 0.7;
  // Memory kept for the demotion's shingle sets between searches (least
  // recently used first out; a chunk's set is recomputed if its text
  // changed). 0 = none: every search shingles its candidates anew. Results
  // are the same either way. Default 32 MiB (about 1,300 chunks of 4,096
  // tokens, or 10,000 of 512).
  size_t shingle_cache_bytes = size_t{32} << 20;
  // Reopening a directory with another embedder or vector index than it
  // was built with (each is fingerprinted in the catalogue):
  //  kUpgrade (default): re-embed every chunk from its stored text when only
  //    the text embedder's version changed (same name and parameters, e.g.
  //    "hashed-tfidf-v1:..." -> "hashed-tfidf-v2:..."); refuse any other
  //    change with FailedPrecondition naming the stored and the new setting;
  //  kRebuild: also re-embed for another text embedder, and rebuild the
  //    vector index from the stored vectors for another factory or metric;
  //  kRefuse: refuse every change.
  // Caller-supplied vectors (embeds_text() false) are never recomputed, and
  // another tokenizer or chunker changes the chunks themselves: both always
  // refused (re-ingest into a new directory).
  // A refusal is FailedPrecondition with the payload kSettingsRefused:
  // "reembed" when an unfinished re-embed is among the reasons, else
  // "changed" (so a caller can name its own way out without reading the
  // message).
  enum class SettingChange { kUpgrade, kRebuild, kRefuse };
  SettingChange on_setting_change = SettingChange::kUpgrade;
  // Rebuild the vector index when tombstones exceed this share (HNSW/IVF).
  double rebuild_tombstone_fraction = 0.25;
  // fsync each catalogue mutation (default true).
  bool sync_writes = true;
};

struct SearchOptions {
  // Number of results, 1..VectorIndex::kMaxK (default 10).
  int k = 10;
  // When non-null, only chunks of these documents (unknown ids are ignored).
  const absl::flat_hash_set<std::string>* doc_filter = nullptr;
  SearchMode mode = SearchMode::kDefault;
  // Fill token_ids / text of results (default true).
  bool with_tokens = true;
  bool with_text = true;
};

struct SearchResult {
  int64_t chunk_id = -1;
  std::string doc_id;
  int32_t ordinal = 0;
  float score = 0;  // dense: inner product (or -L2); bm25: BM25; hybrid: RRF
  std::vector<int32_t> token_ids;
  std::string text;
  std::string kv_key;  // empty until services/ sets it (SetChunkKey)
};

struct IngestStats {
  int64_t documents = 0;
  int64_t chunks = 0;
};

struct RetrieverStats {
  int64_t documents = 0;
  int64_t chunks = 0;
  int64_t indexed_vectors = 0;
  int64_t tombstones = 0;
  bool index_trained = false;
  uint64_t generation = 0;
};

// ChunkIndexText: the text a chunk is embedded and BM25-indexed from: the
// document's title, a newline, then the chunk's text (the chunk's text alone
// without a title). Callers that embed with their own model embed this.
std::string ChunkIndexText(std::string_view title, std::string_view chunk_text);

class Retriever {
 public:
  // Create: opens (or creates) the retriever under options.dir.
  // InvalidArgument for bad options; FailedPrecondition when the directory
  // was created with another tokenizer, embedder, chunker, factory or metric
  // (their fingerprints are stored); DataLoss/Internal from storage.
  static absl::StatusOr<std::unique_ptr<Retriever>> Create(RetrieverOptions options);

  // The destructor saves the index when it changed since the last Save
  // (errors are logged: the catalogue is authoritative).
  ~Retriever();

  // Ingest: adds new documents, all or nothing. InvalidArgument for invalid
  // documents (ValidateDocument) or ids repeated in the batch; AlreadyExists
  // for an id already in the catalogue; FailedPrecondition when the embedder
  // does not embed text (use IngestWithVectors).
  absl::StatusOr<IngestStats> Ingest(absl::Span<const Document> docs) ABSL_LOCKS_EXCLUDED(mu_);

  // ChunkDocument: the chunks Ingest would make of `doc` (deterministic), so
  // that a caller with its own embedder can compute one vector per chunk.
  absl::StatusOr<std::vector<ChunkSpan>> ChunkDocument(const Document& doc) const;

  // Upsert: adds the documents and atomically replaces those that exist
  // (readers see the old or the new version, never neither); all or
  // nothing, as Ingest. Replaced documents' chunks get new chunk ids.
  // `vectors`: empty (the embedder embeds the text) or one entry per
  // document, each as IngestWithVectors takes it.
  absl::StatusOr<IngestStats> Upsert(absl::Span<const Document> docs,
                                     absl::Span<const std::vector<float>> vectors = {})
      ABSL_LOCKS_EXCLUDED(mu_);

  // IngestWithVectors: adds `doc` with caller-supplied vectors, one per
  // chunk of ChunkDocument(doc), row-major (chunks * dim floats).
  // InvalidArgument for a count/dim mismatch or NaN/Inf; else as Ingest.
  absl::StatusOr<IngestStats> IngestWithVectors(const Document& doc, absl::Span<const float> vectors)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Update: atomically replaces an existing document (NotFound if absent).
  // Its chunks get new chunk ids. `vectors` as IngestWithVectors, or empty to
  // embed with the embedder.
  absl::StatusOr<IngestStats> Update(const Document& doc, absl::Span<const float> vectors = {})
      ABSL_LOCKS_EXCLUDED(mu_);

  // Delete: removes a document and its chunks. NotFound if absent.
  absl::Status Delete(const std::string& doc_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Search: top-k chunks for a query text. InvalidArgument for k out of
  // range; FailedPrecondition for dense modes with a non-text embedder or an
  // untrained index.
  absl::StatusOr<std::vector<SearchResult>> Search(std::string_view query,
                                                   const SearchOptions& options) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // SearchByVector: dense top-k for a query vector (dim floats; mode is
  // ignored). InvalidArgument for a wrong dim, NaN/Inf, or k out of range.
  absl::StatusOr<std::vector<SearchResult>> SearchByVector(absl::Span<const float> query,
                                                           const SearchOptions& options) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // NearestChunks: the `k` chunks nearest to chunk `chunk_id` in the dense
  // index (its own stored vector as the query), nearest first, without the
  // chunk itself and without a second chunk of the same tokens as it or as
  // one already taken; token_ids filled, text not. Fewer when the index
  // holds fewer. NotFound for an unknown chunk or one without a stored
  // vector; InvalidArgument for k outside [1, VectorIndex::kMaxK - 5]; the
  // index's errors (an untrained index: FailedPrecondition).
  absl::StatusOr<std::vector<SearchResult>> NearestChunks(int64_t chunk_id, int k) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // NearestChunkIds: NearestChunks' ids for many chunks in one batched
  // index search (what the neighbour precompute pass uses: one search per
  // chunk costs |index| x dim each). out[i] belongs to chunk_ids[i]; a
  // chunk without a record or vector gets an empty list.
  absl::StatusOr<std::vector<std::vector<int64_t>>> NearestChunkIds(
      absl::Span<const int64_t> chunk_ids, int k) const ABSL_LOCKS_EXCLUDED(mu_);

  // SetChunkNeighbours / ChunkNeighbours: the neighbour list a chunk's
  // neighbour-aware record (k neighbours) was computed with, kept in the
  // catalogue's meta family ("neighbours/v1/<k>/<chunk id>"; docs/
  // retrieval.md "Neighbour-aware records") so that a request finds the
  // record without searching. Set: one atomic write of every pair.
  // ChunkNeighbours: nullopt when none was recorded; DataLoss for an
  // undecodable value.
  absl::Status SetChunkNeighbours(
      int k, const std::vector<std::pair<int64_t, std::vector<int64_t>>>& lists);
  absl::StatusOr<std::optional<std::vector<int64_t>>> ChunkNeighbours(int64_t chunk_id,
                                                                      int k) const;

  // SetChunkKey: records the KV-store key of a chunk (NotFound if absent).
  absl::Status SetChunkKey(int64_t chunk_id, std::string kv_key) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::optional<ChunkRecord>> GetChunk(int64_t chunk_id) const;
  // ForEachChunk: every chunk of the catalogue in chunk id order (one
  // consistent snapshot); a non-OK status from `fn` stops the scan and is
  // returned.
  absl::Status ForEachChunk(const std::function<absl::Status(const ChunkRecord&)>& fn) const;
  // FindChunks: the catalogue's chunks found inside `prompt` at any offset
  // (chunk_matcher.h: every hit verified against the chunk's tokens,
  // overlaps resolved deterministically), in prompt order.
  absl::StatusOr<std::vector<ChunkMatch>> FindChunks(absl::Span<const int32_t> prompt) const
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::optional<DocumentRecord>> GetDocument(const std::string& doc_id) const;

  // Save: writes the vector index and records its generation.
  absl::Status Save() ABSL_LOCKS_EXCLUDED(mu_);

  RetrieverStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  const Embedder& embedder() const { return *options_.embedder; }
  // index: the vector index (for benchmarks; do not mutate it). Valid until
  // the next Ingest/Update/Delete (which may rebuild and replace it).
  const VectorIndex& index() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Prepared;
  explicit Retriever(RetrieverOptions options);
  absl::Status Open();
  absl::StatusOr<Prepared> Prepare(const Document& doc, absl::Span<const float> vectors) const;
  enum class CommitMode { kInsert, kReplace, kUpsert };
  absl::StatusOr<IngestStats> PrepareAndCommit(absl::Span<const Document> docs,
                                               absl::Span<const std::vector<float>> vectors,
                                               CommitMode mode) ABSL_LOCKS_EXCLUDED(mu_);
  // SettingsPlan: what Open re-derives so that the directory matches this
  // opening's settings, and the meta records that say so (`settle`, written
  // only with the re-derivation's last write).
  struct SettingsPlan {
    std::optional<std::string> reembed_from;  // stored vectors of another text embedder
    bool rebuild_index = false;               // the index's factory or metric changed
    std::vector<std::pair<std::string, std::string>> settle;
  };
  // CheckSettings: compares the stored fingerprints with this opening's;
  // records missing ones, fills *plan per on_setting_change, or refuses.
  absl::Status CheckSettings(SettingsPlan* plan);
  absl::StatusOr<IngestStats> Commit(std::vector<Prepared> docs, CommitMode mode) ABSL_LOCKS_EXCLUDED(mu_);
  // StageVectorsLocked: embeds (or takes the caller's) `docs`' vectors
  // batch by batch, writes each batch to the
  // catalogue under `ids` (in order) and adds it to the index, freeing it;
  // `*staged`: how many ids it reached. UnstageVectorsLocked undoes that.
  // retriever_ingest.cc.
  absl::Status StageVectorsLocked(const std::vector<Prepared>& docs, absl::Span<const int64_t> ids,
                                  size_t* staged) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EmbedBatch: the embedder's vectors of `texts`, checked (count, finite).
  absl::StatusOr<std::vector<float>> EmbedBatch(absl::Span<const std::string> texts) const;
  // UnstageVectorsLocked: removes `ids` (staged ids in [begin, end)) from
  // the index and their vectors from the catalogue; a failed catalogue
  // delete is kept in orphan_ranges_.
  void UnstageVectorsLocked(absl::Span<const int64_t> ids, int64_t begin, int64_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RetryOrphanCleanupLocked: deletes the vectors of orphan_ranges_ again.
  void RetryOrphanCleanupLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // IsOrphanLocked: a stored vector no chunk record references (left by a
  // failed ingest, or at/above next_chunk_id_): never indexed.
  bool IsOrphanLocked(int64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RebuildIndexLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReembedAllLocked: every chunk's vector recomputed from its catalogue
  // text with the current embedder; the first batch records the re-embed
  // under way, the last one `plan.settle` (so an interrupted re-embed is
  // resumed or refused, never taken for either embedder's vectors).
  absl::Status ReembedAllLocked(const absl::flat_hash_map<std::string, std::string>& titles,
                                const SettingsPlan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MaybeTrainOrCompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<SearchResult>> SearchLocked(const std::vector<float>* vector,
                                                         std::string_view text, SearchMode mode,
                                                         const SearchOptions& options) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string IndexPath() const;

  RetrieverOptions options_;
  // shingles_: the near-duplicate demotion's shingle sets (null when the
  // demotion is off; with shingle_cache_bytes 0 it computes and keeps none).
  std::unique_ptr<internal::ShingleCache> shingles_;
  std::unique_ptr<Chunker> chunker_;
  std::unique_ptr<Catalogue> catalogue_;
  Bm25Index bm25_;
  ChunkMatcher matcher_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex mu_;
  std::unique_ptr<VectorIndex> index_ ABSL_GUARDED_BY(mu_);
  int64_t next_chunk_id_ ABSL_GUARDED_BY(mu_) = 0;
  // orphan_ranges_: [begin, end) id ranges whose staged vectors a failed
  // ingest could not delete (retried before each ingest).
  std::vector<std::pair<int64_t, int64_t>> orphan_ranges_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t saved_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_documents_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_chunks_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_RETRIEVER_H_
