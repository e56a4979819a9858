#include "retrieval/bm25.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "retrieval/internal/text.h"

namespace ragkv::retrieval {

absl::Status Bm25Index::Add(int64_t id, std::string_view text) {
  std::vector<std::string> words = internal::AnalyzeWords(text);
  absl::flat_hash_map<std::string, int32_t> tf;
  for (std::string& w : words) ++tf[std::move(w)];
  absl::MutexLock lock(&mu_);
  if (docs_.contains(id)) return absl::AlreadyExistsError(absl::StrCat("Bm25Index: id ", id, " present"));
  std::vector<std::string> terms;
  terms.reserve(tf.size());
  for (auto& [term, count] : tf) {
    postings_[term][id] = count;
    terms.push_back(term);
  }
  docs_[id] = {static_cast<int64_t>(words.size()), std::move(terms)};
  total_len_ += static_cast<int64_t>(words.size());
  return absl::OkStatus();
}

void Bm25Index::Remove(int64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = docs_.find(id);
  if (it == docs_.end()) return;
  for (const std::string& term : it->second.second) {
    auto p = postings_.find(term);
    if (p == postings_.end()) continue;
    p->second.erase(id);
    if (p->second.empty()) postings_.erase(p);
  }
  total_len_ -= it->second.first;
  docs_.erase(it);
}

std::vector<SearchHit> Bm25Index::Search(std::string_view query, int k,
                                         const absl::flat_hash_set<int64_t>* allowed) const {
  std::vector<SearchHit> hits;
  if (k <= 0) return hits;
  const std::vector<std::string> words = internal::AnalyzeWords(query);
  absl::ReaderMutexLock lock(&mu_);
  const double n = static_cast<double>(docs_.size());
  if (n == 0) return hits;
  const double avg_len = std::max(1.0, static_cast<double>(total_len_) / n);
  absl::flat_hash_map<int64_t, double> scores;
  for (const std::string& w : words) {
    auto p = postings_.find(w);
    if (p == postings_.end()) continue;
    const double df = static_cast<double>(p->second.size());
    const double idf = std::log(1.0 + (n - df + 0.5) / (df + 0.5));
    for (const auto& [id, tf] : p->second) {
      if (allowed != nullptr && !allowed->contains(id)) continue;
      const double len = static_cast<double>(docs_.at(id).first);
      const double norm = params_.k1 * (1.0 - params_.b + params_.b * len / avg_len);
      scores[id] += idf * tf * (params_.k1 + 1.0) / (tf + norm);
    }
  }
  hits.reserve(scores.size());
  for (const auto& [id, s] : scores) hits.push_back(SearchHit{id, static_cast<float>(s)});
  auto better = [](const SearchHit& a, const SearchHit& b) {
    return a.score != b.score ? a.score > b.score : a.id < b.id;
  };
  if (static_cast<int>(hits.size()) > k) {
    std::partial_sort(hits.begin(), hits.begin() + k, hits.end(), better);
    hits.resize(k);
  } else {
    std::sort(hits.begin(), hits.end(), better);
  }
  return hits;
}

int64_t Bm25Index::DocumentFrequency(std::string_view word) const {
  absl::ReaderMutexLock lock(&mu_);
  auto p = postings_.find(absl::string_view(word.data(), word.size()));
  return p == postings_.end() ? 0 : static_cast<int64_t>(p->second.size());
}

int64_t Bm25Index::NumDocuments() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(docs_.size());
}

}  // namespace ragkv::retrieval
