// Hashed embedder and BM25 against naive references.
#include <cmath>
#include <map>

#include "gtest/gtest.h"
#include "retrieval/bm25.h"
#include "retrieval/embedder.h"
#include "retrieval/internal/text.h"

namespace ragkv::retrieval {
namespace {

double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(HashedEmbedder, DeterministicNormalizedAndSimilarityOrdered) {
  auto e = HashedEmbedder::Create({}).value();
  std::vector<std::string> texts = {"The cat sat on the mat.", "the CAT sat on the mat",
                                    "Quantum chromodynamics of gluons"};
  auto v = e->EmbedDocuments(texts).value();
  auto v2 = e->EmbedDocuments(texts).value();
  EXPECT_EQ(v, v2);
  const int d = e->dim();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(Dot(&v[i * d], &v[i * d], d), 1.0, 1e-5);
  EXPECT_NEAR(Dot(&v[0], &v[d], d), 1.0, 1e-5);  // same words after analysis
  EXPECT_LT(std::abs(Dot(&v[0], &v[2 * d], d)), 0.2);
  EXPECT_NE(e->Fingerprint(), HashedEmbedder::Create({.dim = 128}).value()->Fingerprint());
}

TEST(HashedEmbedder, QueryIdfDownweightsCommonWords) {
  auto e = HashedEmbedder::Create({.dim = 1 << 14}).value();
  Bm25Index stats;
  // "the" is in every document, "zebra" in one.
  ASSERT_TRUE(stats.Add(1, "the zebra").ok());
  for (int i = 2; i < 20; ++i) ASSERT_TRUE(stats.Add(i, "the horse").ok());
  std::vector<std::string> docs = {"the the the the", "zebra"};
  auto dv = e->EmbedDocuments(docs).value();
  auto q = e->EmbedQuery("the zebra", &stats).value();
  const int d = e->dim();
  EXPECT_GT(Dot(q.data(), &dv[d], d), Dot(q.data(), &dv[0], d));
  // Without statistics both words weigh the same.
  auto q0 = e->EmbedQuery("the zebra", nullptr).value();
  EXPECT_NEAR(Dot(q0.data(), &dv[d], d), Dot(q0.data(), &dv[0], d), 1e-4);
}

TEST(Embedders, ExternalAndFunction) {
  ExternalEmbedder ext(8, "mine");
  EXPECT_FALSE(ext.embeds_text());
  std::vector<std::string> one{"x"};
  EXPECT_EQ(ext.EmbedDocuments(one).status().code(), absl::StatusCode::kFailedPrecondition);
  FunctionEmbedder bad(4, "bad", [](absl::Span<const std::string> t) -> absl::StatusOr<std::vector<float>> {
    return std::vector<float>(3, 0.0f);
  });
  EXPECT_EQ(bad.EmbedDocuments(one).status().code(), absl::StatusCode::kInvalidArgument);
  FunctionEmbedder nan(1, "nan", [](absl::Span<const std::string> t) -> absl::StatusOr<std::vector<float>> {
    return std::vector<float>(t.size(), NAN);
  });
  EXPECT_EQ(nan.EmbedQuery("q", nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HashedEmbedder::Create({.dim = 2}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Naive BM25 straight from the formula in bm25.h.
std::map<int64_t, double> NaiveBm25(const std::vector<std::string>& docs, const std::string& query) {
  std::vector<std::vector<std::string>> toks;
  double total = 0;
  for (const auto& d : docs) {
    toks.push_back(internal::AnalyzeWords(d));
    total += toks.back().size();
  }
  const double n = docs.size(), avg = total / n;
  std::map<int64_t, double> scores;
  for (const std::string& t : internal::AnalyzeWords(query)) {
    double df = 0;
    for (const auto& d : toks) df += std::count(d.begin(), d.end(), t) > 0;
    if (df == 0) continue;
    const double idf = std::log(1 + (n - df + 0.5) / (df + 0.5));
    for (size_t i = 0; i < toks.size(); ++i) {
      const double tf = std::count(toks[i].begin(), toks[i].end(), t);
      if (tf == 0) continue;
      scores[i] += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * toks[i].size() / avg));
    }
  }
  return scores;
}

TEST(Bm25Index, MatchesNaiveReferenceAndSupportsRemoval) {
  std::vector<std::string> docs = {"Exeter College, Oxford: a college of the university.",
                                   "The play Hannibal and Scipio by Thomas Nabbes.",
                                   "Scipio defeated Hannibal at Zama; Hannibal fled.",
                                   "Oxford is a city. The university of Oxford is old.",
                                   "unrelated words only here"};
  Bm25Index index;
  for (size_t i = 0; i < docs.size(); ++i) ASSERT_TRUE(index.Add(i, docs[i]).ok());
  EXPECT_EQ(index.Add(0, "dup").code(), absl::StatusCode::kAlreadyExists);
  const std::string query = "Where is the Oxford college of Hannibal's author?";
  auto naive = NaiveBm25(docs, query);
  auto hits = index.Search(query, 10);
  ASSERT_EQ(hits.size(), naive.size());
  for (size_t i = 0; i < hits.size(); ++i) {
    EXPECT_NEAR(hits[i].score, naive[hits[i].id], 1e-4);  // float accumulation of doubles
    if (i > 0) {
      EXPECT_GE(hits[i - 1].score, hits[i].score);
    }
  }
  EXPECT_EQ(index.DocumentFrequency("oxford"), 2);
  index.Remove(3);
  EXPECT_EQ(index.DocumentFrequency("oxford"), 1);
  EXPECT_EQ(index.NumDocuments(), 4);
  for (const auto& h : index.Search(query, 10)) EXPECT_NE(h.id, 3);
  absl::flat_hash_set<int64_t> allowed{1};
  auto filtered = index.Search(query, 10, &allowed);
  ASSERT_EQ(filtered.size(), 1u);
  EXPECT_EQ(filtered[0].id, 1);
}

}  // namespace
}  // namespace ragkv::retrieval
