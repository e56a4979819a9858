// embedder.h: text -> dense vector, behind one interface.
//
// Three kinds (issue 5):
//  (a) HashedEmbedder: the built-in default, needs no weights. Signed feature
//      hashing (xxh3) of lowercase alphanumeric words (and optionally
//      character 3..5-grams) into a dense, L2-normalized vector. Documents are
//      weighted by sublinear TF (1 + ln tf) only, so a stored vector never
//      goes stale as the corpus grows; queries are weighted by IDF from the
//      live corpus statistics (TermStatistics), so the inner product is a
//      TF-IDF score. See docs/retrieval.md for the measured choice.
//  (b) Caller-supplied vectors: ExternalEmbedder (the caller passes vectors
//      with documents and queries; Embed* fail) or FunctionEmbedder (the
//      caller's embedding function, e.g. an RPC to its own model).
//  (c) Mean-pooled hidden states of a model/ checkpoint: retrieval may not
//      depend on model/ (docs/design.md §2), so services/ implements Embedder over
//      model/'s forward pass (mean over the final-norm hidden states of the
//      text's tokens, then L2-normalize) and passes it to the Retriever.
//
// Thread safety: all methods are const and must be safe to call concurrently.
#ifndef RAGKV_RETRIEVAL_EMBEDDER_H_
#define RAGKV_RETRIEVAL_EMBEDDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ragkv::retrieval {

// TermStatistics: corpus document frequencies over the words of
// internal AnalyzeWords (lowercase alphanumeric). The Retriever's BM25 index
// implements it over the live catalogue.
class TermStatistics {
 public:
  virtual ~TermStatistics() = default;
  virtual int64_t DocumentFrequency(std::string_view word) const = 0;
  virtual int64_t NumDocuments() const = 0;
};

class Embedder {
 public:
  virtual ~Embedder() = default;

  // dim: the vector dimension (> 0).
  virtual int dim() const = 0;

  // Fingerprint: stable name + parameters. The catalogue records it and
  // refuses to reopen under another embedder (stored vectors would not match).
  virtual std::string Fingerprint() const = 0;

  // embeds_text: false when vectors must come from the caller.
  virtual bool embeds_text() const { return true; }

  // EmbedDocuments: texts.size() * dim() floats, row-major, finite.
  virtual absl::StatusOr<std::vector<float>> EmbedDocuments(
      absl::Span<const std::string> texts) const = 0;

  // EmbedQuery: dim() floats. `stats` may be null; embedders that use corpus
  // statistics fall back to unweighted features without them.
  virtual absl::StatusOr<std::vector<float>> EmbedQuery(std::string_view text,
                                                        const TermStatistics* stats) const = 0;
};

struct HashedEmbedderOptions {
  // Vector dimension (default 4096). Collisions fall as dim grows.
  int dim = 4096;
  // Weight of character 3..5-gram features relative to words (default 0:
  // measured to hurt answer recall on MuSiQue, see docs/retrieval.md).
  float char_ngram_weight = 0.0f;
  // Hash seed (part of the fingerprint). Default 0.
  uint64_t seed = 0;
};

class HashedEmbedder final : public Embedder {
 public:
  // Create: InvalidArgument for dim < 8 or a negative/non-finite weight.
  static absl::StatusOr<std::unique_ptr<HashedEmbedder>> Create(HashedEmbedderOptions options);

  int dim() const override { return options_.dim; }
  std::string Fingerprint() const override;
  absl::StatusOr<std::vector<float>> EmbedDocuments(
      absl::Span<const std::string> texts) const override;
  absl::StatusOr<std::vector<float>> EmbedQuery(std::string_view text,
                                                const TermStatistics* stats) const override;

 private:
  explicit HashedEmbedder(HashedEmbedderOptions options) : options_(options) {}
  void Accumulate(std::string_view feature, float weight, float* out) const;
  HashedEmbedderOptions options_;
};

// ExternalEmbedder: vectors are supplied by the caller (Retriever::
// IngestWithVectors / SearchByVector). Embed* return FailedPrecondition.
class ExternalEmbedder final : public Embedder {
 public:
  // `fingerprint` names the caller's model (e.g. "openai-3-small@v1").
  ExternalEmbedder(int dim, std::string fingerprint)
      : dim_(dim), fingerprint_(std::move(fingerprint)) {}
  int dim() const override { return dim_; }
  std::string Fingerprint() const override { return "external:" + fingerprint_; }
  bool embeds_text() const override { return false; }
  absl::StatusOr<std::vector<float>> EmbedDocuments(
      absl::Span<const std::string> texts) const override;
  absl::StatusOr<std::vector<float>> EmbedQuery(std::string_view text,
                                                const TermStatistics* stats) const override;

 private:
  int dim_;
  std::string fingerprint_;
};

// FunctionEmbedder: the caller's embedding function, used for documents and
// queries alike. `fn` must be thread-safe and return texts.size() * dim floats.
class FunctionEmbedder final : public Embedder {
 public:
  using Fn = std::function<absl::StatusOr<std::vector<float>>(absl::Span<const std::string>)>;
  FunctionEmbedder(int dim, std::string fingerprint, Fn fn)
      : dim_(dim), fingerprint_(std::move(fingerprint)), fn_(std::move(fn)) {}
  int dim() const override { return dim_; }
  std::string Fingerprint() const override { return "function:" + fingerprint_; }
  absl::StatusOr<std::vector<float>> EmbedDocuments(
      absl::Span<const std::string> texts) const override;
  absl::StatusOr<std::vector<float>> EmbedQuery(std::string_view text,
                                                const TermStatistics* stats) const override;

 private:
  int dim_;
  std::string fingerprint_;
  Fn fn_;
};

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_EMBEDDER_H_
