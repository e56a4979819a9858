// vector_index.h: a FAISS vector index keyed by 64-bit chunk ids.
//
// Wraps faiss::IndexIDMap2 over any index_factory() string: "Flat" (exact),
// "HNSW32" (graph), "IVF256,PQ16" / "IVF100,Flat" (inverted file; needs
// Train() before Add()). Scores are "higher is better": the inner product for
// kInnerProduct, the negated squared distance for kL2.
//
// Removal: Flat and IVF remove in place (IDMap2 + IDSelectorBatch). HNSW
// cannot remove, so removed ids become tombstones: searches over-fetch by the
// tombstone count and filter them out, and when tombstones exceed 25% of the
// stored vectors the index is rebuilt from its own reconstructed vectors
// (exact for HNSW<n>/HNSW<n>,Flat; lossy for compressed storage).
//
// Filtering: Search(..., allowed) returns only ids in `allowed`, by iterative
// over-fetch (doubling up to the index size), so for Flat the result is the
// exact filtered top-k.
//
// Thread safety: reader/writer discipline. Search, Save, size may run
// concurrently with each other; Add/Remove/Train take an exclusive lock.
// Every FAISS call runs with the calling thread's OpenMP team capped at
// options.omp_threads (omp_set_num_threads is per calling thread).
#ifndef RAGKV_RETRIEVAL_VECTOR_INDEX_H_
#define RAGKV_RETRIEVAL_VECTOR_INDEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace faiss {
template <typename IndexT>
struct IndexIDMap2Template;
struct Index;
}  // namespace faiss

namespace ragkv::retrieval {
namespace internal {
class VectorIndexAccess;
}  // namespace internal

enum class Metric : int { kInnerProduct = 0, kL2 = 1 };

struct VectorIndexOptions {
  // FAISS index_factory description without "IDMap" (added here). Default
  // "Flat". Unknown strings fail Create with InvalidArgument.
  std::string factory = "Flat";
  // Vector dimension (> 0, required).
  int dim = 0;
  // Default kInnerProduct (embedders produce L2-normalized vectors: cosine).
  Metric metric = Metric::kInnerProduct;
  // OpenMP threads FAISS may use per call (default 1: the sidecar already
  // runs concurrent requests; no nested pools on small machines).
  int omp_threads = 1;
  // HNSW efSearch (default 64; raised to the fetch size when larger).
  int hnsw_ef_search = 64;
  // IVF nprobe (default 16).
  int ivf_nprobe = 16;
  // Re-ranking depth factor for refined indexes (factory ending ",RFlat"):
  // the base index returns k * refine_k_factor candidates that are re-scored
  // exactly (default 8).
  int refine_k_factor = 8;
};

struct SearchHit {
  int64_t id = -1;
  float score = 0;  // higher is better
};

class VectorIndex {
 public:
  // kMaxK: the largest k Search accepts.
  static constexpr int kMaxK = 100000;

  // Create: an empty index. InvalidArgument for dim <= 0, omp_threads < 1,
  // or a factory string FAISS rejects (or that contains "IDMap").
  static absl::StatusOr<std::unique_ptr<VectorIndex>> Create(VectorIndexOptions options);

  // Load: an index written by Save. The runtime knobs (omp_threads,
  // hnsw_ef_search, ivf_nprobe) come from `runtime`; factory, dim and metric
  // from the file and must match `runtime`'s when those are set (factory
  // non-empty, dim > 0), else FailedPrecondition. NotFound when missing,
  // DataLoss when the file is corrupt (bad magic, checksum, FAISS payload).
  static absl::StatusOr<std::unique_ptr<VectorIndex>> Load(const std::string& path,
                                                           VectorIndexOptions runtime);

  ~VectorIndex();
  VectorIndex(const VectorIndex&) = delete;
  VectorIndex& operator=(const VectorIndex&) = delete;

  // is_trained: false for IVF/PQ indexes until Train succeeds.
  bool is_trained() const ABSL_LOCKS_EXCLUDED(mu_);

  // Train: trains on n = vectors.size()/dim vectors. InvalidArgument for a
  // size not a multiple of dim, non-finite values, or too few vectors for the
  // index (FAISS's message is kept).
  absl::Status Train(absl::Span<const float> vectors) ABSL_LOCKS_EXCLUDED(mu_);

  // Add: adds ids[i] -> vectors[i*dim, (i+1)*dim). All-or-nothing:
  // InvalidArgument for size mismatch, negative ids, NaN/Inf; AlreadyExists
  // for an id already present (or repeated in the batch);
  // FailedPrecondition when the index is not trained.
  absl::Status Add(absl::Span<const int64_t> ids, absl::Span<const float> vectors)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Reserve: room for `more` vectors beyond the current ones, taken at
  // once (flat code storage and the id map), so a large Add sequence does
  // not grow them by doubling (old and new buffers side by side). Never
  // less than doubling: many small reservations stay amortized.
  void Reserve(int64_t more) ABSL_LOCKS_EXCLUDED(mu_);
  // ReleaseSpare: gives back the room beyond 4x what is stored (after a
  // Remove of most vectors, or a Reserve whose Adds did not come); the
  // slack keeps alternating deletes and ingests from reallocating.
  void ReleaseSpare() ABSL_LOCKS_EXCLUDED(mu_);

  // Remove: removes the ids that are present; returns how many were.
  absl::StatusOr<int64_t> Remove(absl::Span<const int64_t> ids) ABSL_LOCKS_EXCLUDED(mu_);

  // Search: for each of the n = queries.size()/dim queries, up to k hits,
  // best first (fewer when the index, or the allowed set, holds fewer).
  // InvalidArgument for k <= 0 or k > kMaxK, a size not a multiple of dim,
  // or NaN/Inf. `allowed`, when non-null, restricts results to those ids.
  absl::StatusOr<std::vector<std::vector<SearchHit>>> Search(
      absl::Span<const float> queries, int k,
      const absl::flat_hash_set<int64_t>* allowed = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);

  // Save: writes the index (versioned, checksummed; docs/retrieval.md)
  // atomically (temp file + fsync + rename). Internal on I/O failure.
  absl::Status Save(const std::string& path) const ABSL_LOCKS_EXCLUDED(mu_);

  // size: live (searchable) vectors. tombstones: removed but still stored.
  int64_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t tombstones() const ABSL_LOCKS_EXCLUDED(mu_);
  bool Contains(int64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  int dim() const { return options_.dim; }
  const VectorIndexOptions& options() const { return options_; }

 private:
  friend class internal::VectorIndexAccess;
  using IdMap = faiss::IndexIDMap2Template<faiss::Index>;

  VectorIndex(VectorIndexOptions options, std::unique_ptr<IdMap> index);
  void ApplyRuntimeParams() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSpareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SupportsRemove() const;

  const VectorIndexOptions options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<IdMap> index_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> tombstones_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_VECTOR_INDEX_H_
