// bm25.h: an in-memory Okapi BM25 index over chunk texts, and the corpus term
// statistics (document frequencies) the hashed embedder's query IDF uses.
//
// Terms are internal AnalyzeWords (lowercase ASCII alphanumeric words).
// Scoring: sum over query terms t (with repetition) of
//   idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len)),
//   idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)).
// The Retriever rebuilds it from the catalogue on open (it is not persisted).
//
// Thread safety: internally synchronized (reader/writer); all methods may be
// called concurrently.
#ifndef RAGKV_RETRIEVAL_BM25_H_
#define RAGKV_RETRIEVAL_BM25_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "retrieval/embedder.h"
#include "retrieval/vector_index.h"

namespace ragkv::retrieval {

struct Bm25Params {
  float k1 = 1.2f;  // term-frequency saturation (default 1.2)
  float b = 0.75f;  // length normalization (default 0.75)
};

class Bm25Index final : public TermStatistics {
 public:
  explicit Bm25Index(Bm25Params params = {}) : params_(params) {}

  // Add: indexes `text` under `id`. AlreadyExists if present.
  absl::Status Add(int64_t id, std::string_view text) ABSL_LOCKS_EXCLUDED(mu_);
  // Remove: no-op for an absent id.
  void Remove(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // Search: up to k best (score > 0) ids, best first; ties by smaller id.
  // `allowed`, when non-null, restricts the ids. k <= 0 gives no hits.
  std::vector<SearchHit> Search(std::string_view query, int k,
                                const absl::flat_hash_set<int64_t>* allowed = nullptr) const
      ABSL_LOCKS_EXCLUDED(mu_);

  int64_t DocumentFrequency(std::string_view word) const override ABSL_LOCKS_EXCLUDED(mu_);
  int64_t NumDocuments() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Bm25Params params_;
  mutable absl::Mutex mu_;
  // term -> (id -> tf)
  absl::flat_hash_map<std::string, absl::flat_hash_map<int64_t, int32_t>> postings_ ABSL_GUARDED_BY(mu_);
  // id -> (length in terms, distinct terms)
  absl::flat_hash_map<int64_t, std::pair<int64_t, std::vector<std::string>>> docs_ ABSL_GUARDED_BY(mu_);
  int64_t total_len_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_BM25_H_
