// bench_retrieval.h: the retrieval quality and speed benchmarks behind
// `ragkv bench retrieval` (services/ wires the CLI; ragkv_bench_retrieval is
// a standalone runner).
//
// Quality: ingest every passage of a MuSiQue-style JSON file into one
// retriever per configuration; for each question take the top-10 chunks and
// count a hit at k when any of the top-k chunks (title + text) contains one
// of the question's answers, case-insensitively. Prints exactly one line per
// configuration:   <name>: recall@1=0.xx recall@5=0.xx recall@10=0.xx
#ifndef RAGKV_BENCH_RETRIEVAL_BENCH_RETRIEVAL_H_
#define RAGKV_BENCH_RETRIEVAL_BENCH_RETRIEVAL_H_

#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "retrieval/bm25.h"
#include "retrieval/embedder.h"
#include "retrieval/retriever.h"
#include "retrieval/tokenizer.h"

namespace ragkv::retrieval {

struct RetrievalBenchOptions {
  // MuSiQue-style JSON: [{question, answers, passages: [{title, text}]}].
  std::string corpus_path;
  // Built-in configurations to run, in order: "default" (RetrieverOptions
  // defaults and SearchMode::kDefault: today the hybrid below), "hashed"
  // (default embedder, dense only), "hashed16k" (dim 16384), "hashed-char"
  // (with char n-grams), "bm25" (BM25 only), "hybrid" (RRF of hashed dense,
  // BM25 and BM25 with pseudo-relevance feedback), "hybrid16k" (the same
  // with dim 16384), "hybrid-noprf" (RRF of hashed dense and BM25 only),
  // "lexical" (SearchMode::kLexical: RRF of BM25 and BM25 with feedback, no
  // dense list).
  std::vector<std::string> embedders = {"default", "hashed", "bm25", "hybrid-noprf", "lexical"};
  // Hash seed of the built-in hashed embedders (default 0, the library
  // default). Other seeds measure how much of a figure is hash-collision luck.
  uint64_t hash_seed = 0;
  // Questions scored: [question_begin, question_end) of the file (end < 0:
  // to the end). All passages are ingested either way. Used for held-out
  // checks (e.g. choose on 0-49, report 50-99).
  int question_begin = 0;
  int question_end = -1;
  // Hybrid knobs of every configuration (defaults: RetrieverOptions').
  Bm25Feedback bm25_feedback;
  int rrf_k = 60;
  // RetrieverOptions::near_duplicate_containment of every configuration
  // (default: the library default; 0 = off).
  double near_duplicate_containment = RetrieverOptions{}.near_duplicate_containment;
  // Extra embedders (e.g. services/' model embedder): a dense line each, plus
  // "<name>+bm25" hybrid when add_hybrid_for_extra.
  std::vector<std::pair<std::string, std::shared_ptr<const Embedder>>> extra_embedders;
  bool add_hybrid_for_extra = true;
  // Tokenizer for chunking (default ByteTokenizer).
  std::shared_ptr<const Tokenizer> tokenizer;
  // Chunk size in tokens. Default 4096 byte-tokens, so that each MuSiQue
  // passage (~2.5 KB, ~550 Llama tokens) is one chunk.
  int chunk_tokens = 4096;
  std::string factory = "Flat";
  // Working directory (a fresh temp dir when empty; removed afterwards).
  std::string work_dir;
  int omp_threads = 1;
};

// RunRetrievalBench: prints the recall table to `out`. InvalidArgument for an
// unknown configuration name or a corpus without questions.
absl::Status RunRetrievalBench(const RetrievalBenchOptions& options, std::ostream& out);

struct RetrievalSpeedBenchOptions {
  std::string corpus_path;  // MuSiQue-style JSON for ingest throughput (optional)
  // Synthetic QPS: `num_vectors` random unit vectors of `dim`, `num_queries`
  // queries, k = 10, one query per call, single thread.
  int num_vectors = 20000;
  int dim = 64;
  int num_queries = 2000;
  std::vector<std::string> factories = {"Flat", "HNSW32", "IVF256,PQ16np", "IVF256,PQ16np,RFlat"};
  std::string work_dir;
  // RetrieverOptions::near_duplicate_containment of the end-to-end search
  // lines (default: the library default; 0 = off).
  double near_duplicate_containment = RetrieverOptions{}.near_duplicate_containment;
};

// RunRetrievalSpeedBench: prints ingest chunks/s and, per factory, QPS of
// VectorIndex::Search vs raw FAISS on the same index and queries (and their
// ratio), one line each.
absl::Status RunRetrievalSpeedBench(const RetrievalSpeedBenchOptions& options, std::ostream& out);

}  // namespace ragkv::retrieval

#endif  // RAGKV_BENCH_RETRIEVAL_BENCH_RETRIEVAL_H_
