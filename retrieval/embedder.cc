#include "retrieval/embedder.h"

#include <cmath>

#include <xxhash.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "retrieval/internal/text.h"

namespace ragkv::retrieval {
namespace {

void L2Normalize(float* v, int dim) {
  double ss = 0;
  for (int i = 0; i < dim; ++i) ss += static_cast<double>(v[i]) * v[i];
  if (ss <= 0) return;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (int i = 0; i < dim; ++i) v[i] *= inv;
}

absl::flat_hash_map<std::string, int> CountWords(std::string_view text) {
  absl::flat_hash_map<std::string, int> counts;
  for (std::string& w : internal::AnalyzeWords(text)) ++counts[std::move(w)];
  return counts;
}

absl::Status CheckOutput(const std::vector<float>& v, size_t n, int dim, absl::string_view who) {
  if (v.size() != n * static_cast<size_t>(dim)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": returned ", v.size(), " floats, expected ",
                                                   n, " x ", dim));
  }
  for (float x : v) {
    if (!std::isfinite(x)) return absl::InvalidArgumentError(absl::StrCat(who, ": non-finite value"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HashedEmbedder>> HashedEmbedder::Create(HashedEmbedderOptions options) {
  if (options.dim < 8) {
    return absl::InvalidArgumentError(absl::StrCat("HashedEmbedder: dim must be >= 8, got ", options.dim));
  }
  if (!std::isfinite(options.char_ngram_weight) || options.char_ngram_weight < 0) {
    return absl::InvalidArgumentError("HashedEmbedder: char_ngram_weight must be finite and >= 0");
  }
  return std::unique_ptr<HashedEmbedder>(new HashedEmbedder(options));
}

std::string HashedEmbedder::Fingerprint() const {
  return absl::StrFormat("hashed-tfidf-v2:dim=%d:char=%g:seed=%u", options_.dim,
                         options_.char_ngram_weight, options_.seed);
}

void HashedEmbedder::Accumulate(std::string_view feature, float weight, float* out) const {
  const uint64_t h = XXH3_64bits_withSeed(feature.data(), feature.size(), options_.seed);
  const size_t idx = static_cast<size_t>(h % static_cast<uint64_t>(options_.dim));
  out[idx] += (h >> 63) ? weight : -weight;
}

absl::StatusOr<std::vector<float>> HashedEmbedder::EmbedDocuments(
    absl::Span<const std::string> texts) const {
  const int dim = options_.dim;
  std::vector<float> out(texts.size() * static_cast<size_t>(dim), 0.0f);
  std::string feature;
  for (size_t t = 0; t < texts.size(); ++t) {
    float* v = out.data() + t * dim;
    for (const auto& [word, count] : CountWords(texts[t])) {
      const float w = 1.0f + std::log(static_cast<float>(count));
      feature.assign("w:");
      feature += word;
      Accumulate(feature, w, v);
      if (options_.char_ngram_weight > 0) {
        const std::string padded = "<" + word + ">";
        for (size_t n = 3; n <= 5; ++n) {
          for (size_t i = 0; i + n <= padded.size(); ++i) {
            feature.assign("c:");
            feature.append(padded, i, n);
            Accumulate(feature, w * options_.char_ngram_weight, v);
          }
        }
      }
    }
    L2Normalize(v, dim);
  }
  return out;
}

absl::StatusOr<std::vector<float>> HashedEmbedder::EmbedQuery(std::string_view text,
                                                              const TermStatistics* stats) const {
  const int dim = options_.dim;
  std::vector<float> v(dim, 0.0f);
  const int64_t n_docs = stats != nullptr ? stats->NumDocuments() : 0;
  std::string feature;
  for (const auto& [word, count] : CountWords(text)) {
    float idf = 1.0f;
    if (n_docs > 0) {
      const int64_t df = stats->DocumentFrequency(word);
      // A word absent from the corpus can only match through hash collisions.
      if (df == 0) continue;
      idf = static_cast<float>(std::log((n_docs + 1.0) / (df + 1.0)) + 1.0);
    }
    const float w = idf * (1.0f + std::log(static_cast<float>(count)));
    feature.assign("w:");
    feature += word;
    Accumulate(feature, w, v.data());
    if (options_.char_ngram_weight > 0) {
      const std::string padded = "<" + word + ">";
      for (size_t n = 3; n <= 5; ++n) {
        for (size_t i = 0; i + n <= padded.size(); ++i) {
          feature.assign("c:");
          feature.append(padded, i, n);
          Accumulate(feature, w * options_.char_ngram_weight, v.data());
        }
      }
    }
  }
  L2Normalize(v.data(), dim);
  return v;
}

absl::StatusOr<std::vector<float>> ExternalEmbedder::EmbedDocuments(
    absl::Span<const std::string>) const {
  return absl::FailedPreconditionError(
      "ExternalEmbedder: vectors are supplied by the caller (use IngestWithVectors)");
}

absl::StatusOr<std::vector<float>> ExternalEmbedder::EmbedQuery(std::string_view,
                                                                const TermStatistics*) const {
  return absl::FailedPreconditionError(
      "ExternalEmbedder: query vectors are supplied by the caller (use SearchByVector)");
}

absl::StatusOr<std::vector<float>> FunctionEmbedder::EmbedDocuments(
    absl::Span<const std::string> texts) const {
  auto r = fn_(texts);
  if (!r.ok()) return r.status();
  absl::Status s = CheckOutput(*r, texts.size(), dim_, "FunctionEmbedder");
  if (!s.ok()) return s;
  return r;
}

absl::StatusOr<std::vector<float>> FunctionEmbedder::EmbedQuery(std::string_view text,
                                                                const TermStatistics*) const {
  std::vector<std::string> one{std::string(text)};
  return EmbedDocuments(one);
}

}  // namespace ragkv::retrieval
