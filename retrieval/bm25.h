// bm25.h: an in-memory Okapi BM25 index over chunk texts, and the corpus term
// statistics (document frequencies) the hashed embedder's query IDF uses.
//
// Terms are internal AnalyzeWords (lowercase ASCII alphanumeric words).
// Scoring: sum over query terms t (with repetition) of
//   idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len)),
//   idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)).
// The Retriever rebuilds it from the catalogue on open (it is not persisted).
//
// Pseudo-relevance feedback (SearchWithFeedback, RM3-style): a first BM25
// pass picks the top `docs` hits; every word of those documents that is not
// in the query scores sum over feedback docs of (tf / len) * idf; the
// `terms` best (ties by word) join the query with weight
// `weight * score / best score` (each original query word weighs its count),
// and a second BM25 pass ranks with the weighted query. It adds the words
// that co-occur with the query's entities (e.g. the bridge entity of a
// multi-hop question) without any model.
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

// Bm25Feedback: the pseudo-relevance-feedback knobs (docs == 0 or
// terms == 0 disables it).
struct Bm25Feedback {
  int docs = 3;         // feedback documents taken from the first pass (default 3)
  int terms = 10;       // expansion words added to the query (default 10)
  float weight = 0.5f;  // weight of the best expansion word (default 0.5)
};

// Bm25WeightedTerm: a query word and its weight in a weighted BM25 query.
struct Bm25WeightedTerm {
  std::string word;
  double weight = 1.0;
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

  // SearchWithFeedback: Search with the query expanded by pseudo-relevance
  // feedback (see the top of this file). With feedback disabled, or no
  // first-pass hit, it is exactly Search.
  std::vector<SearchHit> SearchWithFeedback(
      std::string_view query, int k, const Bm25Feedback& feedback,
      const absl::flat_hash_set<int64_t>* allowed = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);

  // ExpandQuery: the weighted query SearchWithFeedback ranks with: the
  // query's words (in first-occurrence order, weight = count) followed by
  // the expansion words (best first). Exposed for tests and diagnostics.
  std::vector<Bm25WeightedTerm> ExpandQuery(
      std::string_view query, const Bm25Feedback& feedback,
      const absl::flat_hash_set<int64_t>* allowed = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);

  int64_t DocumentFrequency(std::string_view word) const override ABSL_LOCKS_EXCLUDED(mu_);
  int64_t NumDocuments() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static std::vector<Bm25WeightedTerm> QueryTerms(std::string_view query);
  double IdfLocked(double df) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ScoreLocked: top-k of the weighted query (score > 0, ties by smaller id).
  std::vector<SearchHit> ScoreLocked(const std::vector<Bm25WeightedTerm>& terms, int k,
                                     const absl::flat_hash_set<int64_t>* allowed) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::vector<Bm25WeightedTerm> ExpandLocked(std::vector<Bm25WeightedTerm> terms,
                                             const Bm25Feedback& feedback,
                                             const absl::flat_hash_set<int64_t>* allowed) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const Bm25Params params_;
  mutable absl::Mutex mu_;
  // term -> (id -> tf)
  absl::flat_hash_map<std::string, absl::flat_hash_map<int64_t, int32_t>> postings_
      ABSL_GUARDED_BY(mu_);
  // id -> (length in terms, distinct terms)
  absl::flat_hash_map<int64_t, std::pair<int64_t, std::vector<std::string>>> docs_
      ABSL_GUARDED_BY(mu_);
  int64_t total_len_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_BM25_H_
