#include "bench/retrieval/bench_retrieval.h"

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "retrieval/corpus_reader.h"
#include "retrieval/internal/vector_index_access.h"
#include "retrieval/retriever.h"

namespace ragkv::retrieval {
namespace {

// A temp dir removed on destruction (unless caller-provided).
class WorkDir {
 public:
  explicit WorkDir(const std::string& requested) {
    if (!requested.empty()) {
      path_ = requested;
      std::filesystem::create_directories(path_);
    } else {
      std::string tmpl = (std::filesystem::temp_directory_path() / "ragkv_bench_XXXXXX").string();
      if (mkdtemp(tmpl.data()) != nullptr) {
        path_ = tmpl;
        owned_ = true;
      }
    }
  }
  ~WorkDir() {
    std::error_code ec;
    if (owned_) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

struct Config {
  std::string name;
  std::shared_ptr<const Embedder> embedder;
  SearchMode mode;
  bool feedback = true;  // hybrid: fuse the BM25-with-feedback list too
};

absl::StatusOr<Config> BuiltinConfig(const std::string& name, uint64_t hash_seed) {
  HashedEmbedderOptions ho;
  ho.seed = hash_seed;
  SearchMode mode = SearchMode::kDense;
  bool feedback = true;
  if (name == "default") {
    mode = SearchMode::kDefault;
  } else if (name == "hashed") {
  } else if (name == "hashed16k") {
    ho.dim = 16384;
  } else if (name == "hashed-char") {
    ho.char_ngram_weight = 0.3f;
  } else if (name == "bm25") {
    mode = SearchMode::kBm25;
  } else if (name == "hybrid") {
    mode = SearchMode::kHybrid;
  } else if (name == "hybrid16k") {
    ho.dim = 16384;
    mode = SearchMode::kHybrid;
  } else if (name == "hybrid-noprf") {
    mode = SearchMode::kHybrid;
    feedback = false;
  } else if (name == "lexical") {
    mode = SearchMode::kLexical;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown embedder configuration '", name,
                     "' (known: default, hashed, hashed16k, hashed-char, bm25, hybrid, hybrid16k, hybrid-noprf, lexical)"));
  }
  ASSIGN_OR_RETURN(auto e, HashedEmbedder::Create(ho));
  return Config{name, std::shared_ptr<const Embedder>(std::move(e)), mode, feedback};
}

bool ContainsAnswer(std::string_view haystack_lower, const std::vector<std::string>& answers_lower) {
  for (const std::string& a : answers_lower) {
    if (!a.empty() && haystack_lower.find(a) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

absl::Status RunRetrievalBench(const RetrievalBenchOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(Corpus corpus, ReadCorpusFile(options.corpus_path, CorpusFormat::kMusique));
  if (corpus.questions.empty()) return absl::InvalidArgumentError("corpus has no questions");
  const int num_questions = static_cast<int>(corpus.questions.size());
  const int q_begin = options.question_begin;
  const int q_end = options.question_end < 0 ? num_questions : options.question_end;
  if (q_begin < 0 || q_begin >= q_end || q_end > num_questions) {
    return absl::InvalidArgumentError(absl::StrCat("question range [", q_begin, ", ", q_end,
                                                   ") is empty or outside the file's ", num_questions,
                                                   " questions"));
  }
  std::vector<Config> configs;
  for (const std::string& name : options.embedders) {
    ASSIGN_OR_RETURN(Config c, BuiltinConfig(name, options.hash_seed));
    configs.push_back(std::move(c));
  }
  for (const auto& [name, e] : options.extra_embedders) {
    configs.push_back(Config{name, e, SearchMode::kDense});
    if (options.add_hybrid_for_extra) configs.push_back(Config{name + "+bm25", e, SearchMode::kHybrid, false});
  }
  WorkDir work(options.work_dir);
  if (work.path().empty()) return absl::InternalError("cannot create a temp work dir");

  absl::flat_hash_map<std::string, std::string> titles;
  for (const Document& d : corpus.documents) titles[d.id] = absl::AsciiStrToLower(d.title);

  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& cfg = configs[ci];
    RetrieverOptions ro;
    ro.dir = absl::StrCat(work.path(), "/", ci);
    ro.tokenizer = options.tokenizer;
    ro.embedder = cfg.embedder;
    ro.chunker.target_tokens = options.chunk_tokens;
    ro.index.factory = options.factory;
    ro.index.omp_threads = options.omp_threads;
    ro.sync_writes = false;
    ro.min_train_vectors = 256;
    ro.bm25_feedback = options.bm25_feedback;
    ro.rrf_k = options.rrf_k;
    ro.near_duplicate_containment = options.near_duplicate_containment;
    if (!cfg.feedback) ro.bm25_feedback.docs = 0;
    ASSIGN_OR_RETURN(auto retriever, Retriever::Create(ro));
    constexpr size_t kBatch = 64;
    for (size_t i = 0; i < corpus.documents.size(); i += kBatch) {
      const size_t n = std::min(kBatch, corpus.documents.size() - i);
      RETURN_IF_ERROR(retriever->Ingest(absl::MakeConstSpan(corpus.documents).subspan(i, n)).status());
    }
    int hits[3] = {0, 0, 0};
    const int ks[3] = {1, 5, 10};
    for (int qi = q_begin; qi < q_end; ++qi) {
      const QaExample& q = corpus.questions[qi];
      SearchOptions so;
      so.k = 10;
      so.mode = cfg.mode;
      so.with_tokens = false;
      ASSIGN_OR_RETURN(std::vector<SearchResult> results, retriever->Search(q.question, so));
      std::vector<std::string> answers;
      for (const std::string& a : q.answers) answers.push_back(absl::AsciiStrToLower(a));
      int first_hit = -1;
      for (size_t r = 0; r < results.size(); ++r) {
        const std::string hay = absl::StrCat(titles[results[r].doc_id], " ", absl::AsciiStrToLower(results[r].text));
        if (ContainsAnswer(hay, answers)) {
          first_hit = static_cast<int>(r);
          break;
        }
      }
      for (int j = 0; j < 3; ++j) {
        if (first_hit >= 0 && first_hit < ks[j]) ++hits[j];
      }
    }
    const double nq = static_cast<double>(q_end - q_begin);
    out << absl::StrFormat("%s: recall@1=%.2f recall@5=%.2f recall@10=%.2f\n", cfg.name, hits[0] / nq,
                           hits[1] / nq, hits[2] / nq);
    out.flush();
  }
  return absl::OkStatus();
}

namespace {

// Variant: one retriever configuration of the end-to-end search lines.
struct Variant {
  const char* name;
  double near_dup;
  size_t shingle_cache_bytes;
};

// IngestCorpus: a retriever over `dir` with every document of `corpus`
// ingested in batches of 64; *secs and *chunks: the ingest's time and count.
absl::StatusOr<std::unique_ptr<Retriever>> IngestCorpus(const Corpus& corpus,
                                                        const std::string& dir, int chunk_tokens,
                                                        const Variant& v, double* secs,
                                                        int64_t* chunks) {
  RetrieverOptions ro;
  ro.dir = dir;
  ro.chunker.target_tokens = chunk_tokens;
  ro.near_duplicate_containment = v.near_dup;
  ro.shingle_cache_bytes = v.shingle_cache_bytes;
  ASSIGN_OR_RETURN(auto retriever, Retriever::Create(ro));
  const auto t0 = Clock::now();
  *chunks = 0;
  constexpr size_t kBatch = 64;
  for (size_t i = 0; i < corpus.documents.size(); i += kBatch) {
    const size_t n = std::min(kBatch, corpus.documents.size() - i);
    ASSIGN_OR_RETURN(IngestStats s,
                     retriever->Ingest(absl::MakeConstSpan(corpus.documents).subspan(i, n)));
    *chunks += s.chunks;
  }
  *secs = SecondsSince(t0);
  return retriever;
}

// TimeSearches: per search mode, every question searched once untimed on
// each retriever (the shingle cache warm, as in steady serving), then three
// timed rounds alternating between them; one line per retriever.
absl::Status TimeSearches(const std::vector<std::unique_ptr<Retriever>>& rs,
                          const Variant (&variants)[3], const Corpus& corpus, int chunk_tokens,
                          std::ostream& out) {
  const std::pair<const char*, SearchMode> modes[] = {{"dense", SearchMode::kDense},
                                                      {"bm25", SearchMode::kBm25},
                                                      {"hybrid", SearchMode::kHybrid},
                                                      {"lexical", SearchMode::kLexical}};
  for (const auto& [mode_name, mode] : modes) {
    SearchOptions so;
    so.k = 10;
    so.mode = mode;
    double secs[3] = {0, 0, 0};
    int64_t n[3] = {0, 0, 0};
    for (int round = -1; round < 3; ++round) {  // round -1: the warm-up
      for (size_t v = 0; v < rs.size(); ++v) {
        const auto s0 = Clock::now();
        for (const QaExample& q : corpus.questions) {
          ASSIGN_OR_RETURN(auto res, rs[v]->Search(q.question, so));
          if (round >= 0) n[v] += !res.empty();
        }
        if (round >= 0) secs[v] += SecondsSince(s0);
      }
    }
    const double off_ms = 1e3 * secs[0] / std::max<int64_t>(1, n[0]);
    for (size_t v = 0; v < rs.size(); ++v) {
      const double ms = 1e3 * secs[v] / std::max<int64_t>(1, n[v]);
      out << absl::StrFormat(
          "retriever search %s chunk_tokens=%d near_dup=%g (%s): %d queries, %.0f QPS, %.3f "
          "ms/query = %.2fx demotion off (embed + Flat + token ids/text from RocksDB, k=10, after "
          "a warm-up pass)\n",
          mode_name, chunk_tokens, variants[v].near_dup, variants[v].name, n[v], 1e3 / ms, ms,
          ms / off_ms);
    }
    out.flush();
  }
  return absl::OkStatus();
}

// EndToEndSpeed: ingest throughput, then per search mode the time of the
// whole Search call (embed, index, catalogue hydration, near-duplicate
// demotion) for three variants (TimeSearches): demotion off, on with no
// shingle cache, on with the default cache.
absl::Status EndToEndSpeed(const RetrievalSpeedBenchOptions& options, const Corpus& corpus,
                           const std::string& work, int chunk_tokens, std::ostream& out) {
  const double nd = options.near_duplicate_containment;
  const Variant variants[] = {
      {"demotion off", 0, 0},
      {"demotion on, no shingle cache", nd, 0},
      {"demotion on, shingle cache", nd, RetrieverOptions{}.shingle_cache_bytes}};
  std::vector<std::unique_ptr<Retriever>> rs;
  for (const Variant& v : variants) {
    double secs = 0;
    int64_t chunks = 0;
    ASSIGN_OR_RETURN(
        auto r, IngestCorpus(corpus, absl::StrCat(work, "/ingest", chunk_tokens, "_", rs.size()),
                             chunk_tokens, v, &secs, &chunks));
    if (rs.empty()) {
      out << absl::StrFormat(
          "ingest chunk_tokens=%d: %d docs, %d chunks in %.2f s = %.0f chunks/s (hashed dim 4096, "
          "Flat, fsync per batch of 64)\n",
          chunk_tokens, corpus.documents.size(), chunks, secs, chunks / secs);
    }
    rs.push_back(std::move(r));
  }
  if (corpus.questions.empty()) return absl::OkStatus();
  return TimeSearches(rs, variants, corpus, chunk_tokens, out);
}

}  // namespace

absl::Status RunRetrievalSpeedBench(const RetrievalSpeedBenchOptions& options, std::ostream& out) {
  WorkDir work(options.work_dir);
  if (work.path().empty()) return absl::InternalError("cannot create a temp work dir");
  omp_set_num_threads(1);

  if (!options.corpus_path.empty()) {
    ASSIGN_OR_RETURN(Corpus corpus, ReadCorpusFile(options.corpus_path));
    for (int chunk_tokens : {512, 4096}) {
      RETURN_IF_ERROR(EndToEndSpeed(options, corpus, work.path(), chunk_tokens, out));
    }
  }

  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  const int dim = options.dim;
  auto random_unit = [&](int n) {
    std::vector<float> v(static_cast<size_t>(n) * dim);
    for (int i = 0; i < n; ++i) {
      double ss = 0;
      for (int j = 0; j < dim; ++j) {
        float x = normal(rng);
        v[static_cast<size_t>(i) * dim + j] = x;
        ss += x * x;
      }
      for (int j = 0; j < dim; ++j) v[static_cast<size_t>(i) * dim + j] /= static_cast<float>(std::sqrt(ss));
    }
    return v;
  };
  const std::vector<float> base = random_unit(options.num_vectors);
  const std::vector<float> queries = random_unit(options.num_queries);
  std::vector<int64_t> ids(options.num_vectors);
  for (int i = 0; i < options.num_vectors; ++i) ids[i] = 1000 + i;
  const int k = 10;

  for (const std::string& factory : options.factories) {
    VectorIndexOptions vo;
    vo.factory = factory;
    vo.dim = dim;
    ASSIGN_OR_RETURN(auto index, VectorIndex::Create(vo));
    if (!index->is_trained()) RETURN_IF_ERROR(index->Train(base));
    RETURN_IF_ERROR(index->Add(ids, base));
    const faiss::IndexIDMap2* raw = internal::VectorIndexAccess::Raw(*index);
    std::vector<float> dist(k);
    std::vector<faiss::Index::idx_t> labels(k);
    // Interleave rounds to even out load from other processes.
    double ragkv_s = 0, raw_s = 0;
    for (int round = 0; round < 3; ++round) {
      Clock::time_point t0 = Clock::now();
      for (int q = 0; q < options.num_queries; ++q) {
        omp_set_num_threads(1);
        raw->search(1, queries.data() + static_cast<size_t>(q) * dim, k, dist.data(), labels.data());
      }
      raw_s += SecondsSince(t0);
      t0 = Clock::now();
      for (int q = 0; q < options.num_queries; ++q) {
        auto r = index->Search(absl::MakeConstSpan(queries).subspan(static_cast<size_t>(q) * dim, dim), k);
        if (!r.ok()) return r.status();
      }
      ragkv_s += SecondsSince(t0);
    }
    const double nq = 3.0 * options.num_queries;
    out << absl::StrFormat("search %s n=%d dim=%d k=%d: ragkv %.0f QPS, raw FAISS %.0f QPS, ratio %.3f\n", factory,
                           options.num_vectors, dim, k, nq / ragkv_s, nq / raw_s, raw_s / ragkv_s);
    out.flush();
  }
  return absl::OkStatus();
}

}  // namespace ragkv::retrieval
