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
  if (docs_.contains(id))
    return absl::AlreadyExistsError(absl::StrCat("Bm25Index: id ", id, " present"));
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

std::vector<Bm25WeightedTerm> Bm25Index::QueryTerms(std::string_view query) {
  std::vector<Bm25WeightedTerm> terms;
  absl::flat_hash_map<std::string, size_t> pos;
  for (std::string& w : internal::AnalyzeWords(query)) {
    auto [it, inserted] = pos.try_emplace(w, terms.size());
    if (inserted) {
      terms.push_back(Bm25WeightedTerm{std::move(w), 1.0});
    } else {
      terms[it->second].weight += 1.0;
    }
  }
  return terms;
}

double Bm25Index::IdfLocked(double df) const {
  const double n = static_cast<double>(docs_.size());
  return std::log(1.0 + (n - df + 0.5) / (df + 0.5));
}

std::vector<SearchHit> Bm25Index::ScoreLocked(const std::vector<Bm25WeightedTerm>& terms, int k,
                                              const absl::flat_hash_set<int64_t>* allowed) const {
  std::vector<SearchHit> hits;
  if (k <= 0) return hits;
  const double n = static_cast<double>(docs_.size());
  if (n == 0) return hits;
  const double avg_len = std::max(1.0, static_cast<double>(total_len_) / n);
  absl::flat_hash_map<int64_t, double> scores;
  // Terms in a fixed order, so every id's sum is computed in the same order.
  for (const Bm25WeightedTerm& t : terms) {
    if (t.weight <= 0) continue;
    auto p = postings_.find(t.word);
    if (p == postings_.end()) continue;
    const double idf = IdfLocked(static_cast<double>(p->second.size()));
    for (const auto& [id, tf] : p->second) {
      if (allowed != nullptr && !allowed->contains(id)) continue;
      const double len = static_cast<double>(docs_.at(id).first);
      const double norm = params_.k1 * (1.0 - params_.b + params_.b * len / avg_len);
      scores[id] += t.weight * idf * tf * (params_.k1 + 1.0) / (tf + norm);
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

std::vector<Bm25WeightedTerm> Bm25Index::ExpandLocked(
    std::vector<Bm25WeightedTerm> terms, const Bm25Feedback& feedback,
    const absl::flat_hash_set<int64_t>* allowed) const {
  if (feedback.docs <= 0 || feedback.terms <= 0 || !(feedback.weight > 0)) return terms;
  const std::vector<SearchHit> first = ScoreLocked(terms, feedback.docs, allowed);
  if (first.empty()) return terms;
  absl::flat_hash_set<std::string_view> in_query;
  for (const Bm25WeightedTerm& t : terms) in_query.insert(t.word);
  absl::flat_hash_map<std::string_view, double> candidates;
  for (const SearchHit& h : first) {
    const auto& [len, doc_terms] = docs_.at(h.id);
    if (len <= 0) continue;
    for (const std::string& w : doc_terms) {
      if (in_query.contains(w)) continue;
      const auto& posting = postings_.at(w);
      const double tf = static_cast<double>(posting.at(h.id));
      candidates[w] +=
          tf / static_cast<double>(len) * IdfLocked(static_cast<double>(posting.size()));
    }
  }
  std::vector<std::pair<std::string_view, double>> ranked(candidates.begin(), candidates.end());
  auto better = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  const size_t n = std::min(ranked.size(), static_cast<size_t>(feedback.terms));
  std::partial_sort(ranked.begin(), ranked.begin() + n, ranked.end(), better);
  ranked.resize(n);
  if (ranked.empty() || !(ranked[0].second > 0)) return terms;
  const double best = ranked[0].second;
  for (const auto& [w, s] : ranked) {
    terms.push_back(Bm25WeightedTerm{std::string(w), feedback.weight * s / best});
  }
  return terms;
}

std::vector<SearchHit> Bm25Index::Search(std::string_view query, int k,
                                         const absl::flat_hash_set<int64_t>* allowed) const {
  const std::vector<Bm25WeightedTerm> terms = QueryTerms(query);
  absl::ReaderMutexLock lock(&mu_);
  return ScoreLocked(terms, k, allowed);
}

std::vector<SearchHit> Bm25Index::SearchWithFeedback(
    std::string_view query, int k, const Bm25Feedback& feedback,
    const absl::flat_hash_set<int64_t>* allowed) const {
  std::vector<Bm25WeightedTerm> terms = QueryTerms(query);
  absl::ReaderMutexLock lock(&mu_);
  if (k <= 0) return {};
  return ScoreLocked(ExpandLocked(std::move(terms), feedback, allowed), k, allowed);
}

std::vector<Bm25WeightedTerm> Bm25Index::ExpandQuery(
    std::string_view query, const Bm25Feedback& feedback,
    const absl::flat_hash_set<int64_t>* allowed) const {
  std::vector<Bm25WeightedTerm> terms = QueryTerms(query);
  absl::ReaderMutexLock lock(&mu_);
  return ExpandLocked(std::move(terms), feedback, allowed);
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
