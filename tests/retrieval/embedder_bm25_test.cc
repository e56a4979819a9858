// Hashed embedder and BM25 against naive references.
#include <cmath>
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

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

// UTF-8 of a code point below U+0800 (two bytes from U+0080).
std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

TEST(AnalyzeWords, FoldsAccentedLatinLettersToAscii) {
  using internal::AnalyzeWords;
  using internal::FoldLatin;
  using Words = std::vector<std::string>;
  // MuSiQue's passages are accent-stripped, its questions are not.
  EXPECT_EQ(AnalyzeWords("S\xC3\xA3o Jos\xC3\xA9 dos Campos"), (Words{"sao", "jose", "dos", "campos"}));
  EXPECT_EQ(AnalyzeWords("P\xC3\xB3voa de Santa Iria's"), AnalyzeWords("povoa de santa iria s"));
  EXPECT_EQ(AnalyzeWords("Stra\xC3\x9F" "e \xC5\x81\xC3\xB3" "d\xC5\xBA \xC3\x86sir \xC5\x92uvre"),
            (Words{"strasse", "lodz", "aesir", "oeuvre"}));
  // Upper and lower case fold alike.
  EXPECT_EQ(AnalyzeWords("\xC3\x89\xC3\x89 \xC3\xA9\xC3\xA9"), (Words{"ee", "ee"}));
  // Not letters, or outside U+00C0..U+017F: the bytes stay inside the word.
  EXPECT_EQ(AnalyzeWords("5\xC3\x97" "3"), (Words{"5\xC3\x97" "3"}));  // U+00D7 multiplication sign
  EXPECT_EQ(AnalyzeWords("\xD0\x9C\xD0\xB8\xD1\x80 x"), (Words{"\xD0\x9C\xD0\xB8\xD1\x80", "x"}));  // Cyrillic
  EXPECT_EQ(AnalyzeWords("a\xC2\xB0" "b"), (Words{"a\xC2\xB0" "b"}));  // U+00B0 degree sign
  // A truncated sequence or a lone continuation byte is kept as bytes.
  EXPECT_EQ(AnalyzeWords("ab\xC3"), (Words{"ab\xC3"}));
  EXPECT_EQ(AnalyzeWords("\xC3 x"), (Words{"\xC3", "x"}));
  EXPECT_EQ(AnalyzeWords("\xC3\xC3\xA9"), (Words{"\xC3" "e"}));

  // Every code point of the folded block against a brute-force reference:
  // the word is the ASCII spelling when FoldLatin has one, else the bytes.
  const std::string vowels_a = "\xC3\x80\xC3\x81\xC3\x82\xC3\x83\xC3\x84\xC3\x85\xC3\xA0\xC3\xA1\xC3\xA2\xC3\xA3"
                               "\xC3\xA4\xC3\xA5\xC4\x80\xC4\x81\xC4\x82\xC4\x83\xC4\x84\xC4\x85";
  EXPECT_EQ(AnalyzeWords(vowels_a), (Words{std::string(18, 'a')}));
  int folded = 0;
  for (uint32_t cp = 0x80; cp < 0x800; ++cp) {
    const std::string_view f = FoldLatin(cp);
    if (cp < 0xC0 || cp >= 0x180) {
      EXPECT_TRUE(f.empty()) << cp;
    }
    for (char c : f) EXPECT_TRUE(c >= 'a' && c <= 'z') << cp;
    folded += f.empty() ? 0 : 1;
    const std::string expect = f.empty() ? "x" + Utf8(cp) + "y" : "x" + std::string(f) + "y";
    EXPECT_EQ(AnalyzeWords("X" + Utf8(cp) + "Y."), (Words{expect})) << cp;
  }
  EXPECT_EQ(folded, 0x180 - 0xC0 - 2);  // all but U+00D7 and U+00F7
  EXPECT_TRUE(FoldLatin(0xD7).empty());
  EXPECT_TRUE(FoldLatin(0xF7).empty());
  EXPECT_EQ(FoldLatin(0xDF), "ss");
  EXPECT_EQ(FoldLatin(0x0107), "c");  // c acute

  // Both consumers see the folded words: BM25 and the hashed embedder.
  Bm25Index bm25;
  ASSERT_TRUE(bm25.Add(1, "sao jose dos campos is a city in brazil").ok());
  ASSERT_TRUE(bm25.Add(2, "porto is a city in portugal").ok());
  const auto hits = bm25.Search("S\xC3\xA3o Jos\xC3\xA9", 10);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].id, 1);
  auto e = HashedEmbedder::Create({}).value();
  EXPECT_EQ(e->EmbedQuery("S\xC3\xA3o Jos\xC3\xA9", nullptr).value(), e->EmbedQuery("sao jose", nullptr).value());
}

TEST(WordShingles, ContainmentMatchesNaiveWordTupleSets) {
  using internal::AnalyzeWords;
  using internal::ShingleContainment;
  using internal::WordShingles;
  // Naive reference: sets of word n-tuples (no hashing).
  auto naive_set = [](const std::string& text, int n) {
    const std::vector<std::string> w = AnalyzeWords(text);
    std::set<std::vector<std::string>> out;
    if (w.empty()) return out;
    const size_t len = std::min<size_t>(n, w.size());
    for (size_t i = 0; i + len <= w.size(); ++i) out.insert({w.begin() + i, w.begin() + i + len});
    return out;
  };
  auto naive_containment = [](const std::set<std::vector<std::string>>& a,
                              const std::set<std::vector<std::string>>& b) {
    if (a.empty() || b.empty()) return 0.0;
    size_t common = 0;
    for (const auto& x : a) common += b.count(x);
    return static_cast<double>(common) / static_cast<double>(std::min(a.size(), b.size()));
  };
  std::mt19937 rng(7);
  const std::vector<std::string> vocab = {"the", "a", "river", "Lisbon", "district", "born", "in", "of",
                                          "municipality", "Vila", "Franca", "de", "Xira"};
  std::vector<std::string> texts = {"", "  ,. ", "one", "two words", "The river. the RIVER!"};
  for (int t = 0; t < 40; ++t) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) s += vocab[rng() % vocab.size()] + (rng() % 5 == 0 ? ", " : " ");
    texts.push_back(s);
    // An overlapping window of the previous text, as sliding-window chunks.
    texts.push_back(s.substr(s.size() / 3) + " Lisbon district");
  }
  for (int n : {1, 3, 5}) {
    std::vector<std::vector<uint64_t>> sh;
    for (const std::string& t : texts) {
      sh.push_back(WordShingles(t, n));
      EXPECT_TRUE(std::is_sorted(sh.back().begin(), sh.back().end()));
      EXPECT_EQ(std::adjacent_find(sh.back().begin(), sh.back().end()), sh.back().end());
      EXPECT_EQ(sh.back().size(), naive_set(t, n).size()) << t;
    }
    for (size_t i = 0; i < texts.size(); ++i) {
      for (size_t j = 0; j < texts.size(); ++j) {
        const double c = ShingleContainment(sh[i], sh[j]);
        EXPECT_DOUBLE_EQ(c, naive_containment(naive_set(texts[i], n), naive_set(texts[j], n)))
            << texts[i] << " | " << texts[j];
        // The early-exit test agrees with the full count at every threshold,
        // the containment's own value (not exceeded) and its neighbours
        // included.
        for (double t : {-1.0, 0.0, 0.3, 0.5, 0.7, 0.9, 1.0, c, std::nextafter(c, -1.0)}) {
          EXPECT_EQ(internal::ContainmentExceeds(sh[i], sh[j], t), c > t)
              << texts[i] << " | " << texts[j] << " t=" << t;
        }
        EXPECT_DOUBLE_EQ(c, ShingleContainment(sh[j], sh[i]));
      }
    }
  }
  // Case and punctuation do not matter; a window is contained in its text.
  EXPECT_EQ(WordShingles("Vila Franca de Xira, Lisbon", 3), WordShingles("vila franca de xira lisbon", 3));
  EXPECT_DOUBLE_EQ(ShingleContainment(WordShingles("a b c d e f g h", 3), WordShingles("c d e f", 3)), 1.0);
  EXPECT_DOUBLE_EQ(ShingleContainment(WordShingles("a b c d", 3), WordShingles("e f g h", 3)), 0.0);
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

// Naive pseudo-relevance feedback straight from the description in bm25.h:
// the weighted query (words in first-occurrence order with their counts,
// then the expansion words best first).
std::vector<std::pair<std::string, double>> NaiveExpand(const std::vector<std::string>& docs,
                                                        const std::string& query, int fb_docs, int fb_terms,
                                                        double weight) {
  std::vector<std::pair<std::string, double>> terms;
  for (const std::string& w : internal::AnalyzeWords(query)) {
    auto it = std::find_if(terms.begin(), terms.end(), [&](const auto& t) { return t.first == w; });
    if (it == terms.end()) {
      terms.emplace_back(w, 1.0);
    } else {
      it->second += 1.0;
    }
  }
  auto first = NaiveBm25(docs, query);
  std::vector<std::pair<int64_t, double>> ranked(first.begin(), first.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (static_cast<int>(ranked.size()) > fb_docs) ranked.resize(fb_docs);
  const double n = docs.size();
  // Sum tf / len * idf once per (feedback doc, distinct word).
  std::map<std::string, double> cand;
  for (const auto& [id, score] : ranked) {
    const std::vector<std::string> words = internal::AnalyzeWords(docs[id]);
    std::set<std::string> distinct(words.begin(), words.end());
    for (const std::string& w : distinct) {
      if (std::any_of(terms.begin(), terms.end(), [&](const auto& t) { return t.first == w; })) continue;
      double df = 0;
      for (const auto& d : docs) {
        auto dw = internal::AnalyzeWords(d);
        df += std::count(dw.begin(), dw.end(), w) > 0;
      }
      const double tf = std::count(words.begin(), words.end(), w);
      cand[w] += tf / words.size() * std::log(1 + (n - df + 0.5) / (df + 0.5));
    }
  }
  std::vector<std::pair<std::string, double>> best(cand.begin(), cand.end());
  std::sort(best.begin(), best.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (static_cast<int>(best.size()) > fb_terms) best.resize(fb_terms);
  for (const auto& [w, x] : best) terms.emplace_back(w, weight * x / best[0].second);
  return terms;
}

std::vector<std::string> FeedbackCorpus() {
  return {"Hannibal and Scipio is a play by Thomas Nabbes, first performed in 1635.",
          "Thomas Nabbes, an English dramatist, studied at Exeter College, Oxford.",
          "Scipio defeated Hannibal at Zama in 202 BC.",
          "Exeter is a city in Devon with a cathedral.",
          "The play was performed by Queen Henrietta's Men in London.",
          "Oxford is a university city on the Thames."};
}

TEST(Bm25Feedback, ExpansionMatchesNaiveReference) {
  const std::vector<std::string> docs = FeedbackCorpus();
  Bm25Index index;
  for (size_t i = 0; i < docs.size(); ++i) ASSERT_TRUE(index.Add(i, docs[i]).ok());
  const std::string query = "Where was the author of the play Hannibal and Scipio educated?";
  for (const Bm25Feedback fb : {Bm25Feedback{1, 3, 0.5f}, Bm25Feedback{2, 10, 1.0f}, Bm25Feedback{3, 5, 0.25f}}) {
    const auto got = index.ExpandQuery(query, fb);
    const auto want = NaiveExpand(docs, query, fb.docs, fb.terms, fb.weight);
    ASSERT_EQ(got.size(), want.size()) << fb.docs << "," << fb.terms;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].word, want[i].first) << i;
      EXPECT_NEAR(got[i].weight, want[i].second, 1e-9) << got[i].word;
    }
    // The second pass is BM25 of the weighted query: sum of weight * term score.
    const auto hits = index.SearchWithFeedback(query, 10, fb);
    std::map<int64_t, double> naive;
    for (const auto& [w, x] : want) {
      for (const auto& [id, sc] : NaiveBm25(docs, w)) naive[id] += x * sc;
    }
    ASSERT_EQ(hits.size(), naive.size());
    for (const SearchHit& h : hits) EXPECT_NEAR(h.score, naive[h.id], 1e-4) << h.id;
  }
}

TEST(Bm25Feedback, FindsTheSecondHopAndIsOffWhenDisabled) {
  const std::vector<std::string> docs = FeedbackCorpus();
  Bm25Index index;
  for (size_t i = 0; i < docs.size(); ++i) ASSERT_TRUE(index.Add(i, docs[i]).ok());
  // The answer passage (1) shares no content word with the question; the
  // first hop (0) names its subject, which feedback adds to the query.
  const std::string query = "Who wrote Hannibal and Scipio, and where was he educated?";
  auto rank_of = [](const std::vector<SearchHit>& hits, int64_t id) {
    for (size_t i = 0; i < hits.size(); ++i) {
      if (hits[i].id == id) return static_cast<int>(i);
    }
    return -1;
  };
  const auto plain = index.Search(query, 10);
  const auto fed = index.SearchWithFeedback(query, 10, Bm25Feedback{1, 10, 0.5f});
  EXPECT_EQ(rank_of(plain, 1), -1);
  EXPECT_EQ(rank_of(fed, 0), 0);
  EXPECT_GE(rank_of(fed, 1), 1);
  // Disabled feedback (or no first-pass hit) is exactly Search.
  for (const Bm25Feedback off : {Bm25Feedback{0, 10, 0.5f}, Bm25Feedback{3, 0, 0.5f}, Bm25Feedback{3, 10, 0.0f}}) {
    const auto same = index.SearchWithFeedback(query, 10, off);
    ASSERT_EQ(same.size(), plain.size());
    for (size_t i = 0; i < same.size(); ++i) {
      EXPECT_EQ(same[i].id, plain[i].id);
      EXPECT_EQ(same[i].score, plain[i].score);
    }
  }
  EXPECT_TRUE(index.SearchWithFeedback("zeppelin", 10, Bm25Feedback{}).empty());
  // The filter applies to the feedback documents too.
  absl::flat_hash_set<int64_t> allowed{1, 3};
  for (const SearchHit& h : index.SearchWithFeedback(query, 10, Bm25Feedback{}, &allowed)) {
    EXPECT_TRUE(allowed.contains(h.id)) << h.id;
  }
  const auto filtered_terms = index.ExpandQuery(query, Bm25Feedback{1, 50, 0.5f}, &allowed);
  for (const auto& t : filtered_terms) EXPECT_NE(t.word, "1635") << "expanded from a filtered-out document";
}

}  // namespace
}  // namespace ragkv::retrieval
