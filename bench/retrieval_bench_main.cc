// ragkv_bench_retrieval: standalone runner for the retrieval benchmarks
// (retrieval/bench_retrieval.h) until `ragkv bench retrieval` wires them.
//
//   ragkv_bench_retrieval --corpus PATH [--embedder NAME[,NAME...]]
//                         [--factory F] [--chunk-tokens N] [--speed]
//                         [--hash-seed S] [--questions BEGIN:END]
//                         [--prf DOCS,TERMS,WEIGHT] [--rrf-k K] [--near-dup C]
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "retrieval/bench_retrieval.h"

int main(int argc, char** argv) {
  ragkv::retrieval::RetrievalBenchOptions options;
  bool speed = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << arg << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--corpus") {
      options.corpus_path = next();
    } else if (arg == "--embedder") {
      options.embedders = absl::StrSplit(next(), ',');
    } else if (arg == "--factory") {
      options.factory = next();
    } else if (arg == "--chunk-tokens") {
      options.chunk_tokens = std::atoi(next().c_str());
    } else if (arg == "--hash-seed") {
      options.hash_seed = std::strtoull(next().c_str(), nullptr, 10);
    } else if (arg == "--questions") {
      const std::vector<std::string> be = absl::StrSplit(next(), ':');
      if (be.size() != 2 || !absl::SimpleAtoi(be[0], &options.question_begin) ||
          !absl::SimpleAtoi(be[1], &options.question_end)) {
        std::cerr << "--questions takes BEGIN:END (0-based, END exclusive)\n";
        return 2;
      }
    } else if (arg == "--prf") {
      const std::vector<std::string> f = absl::StrSplit(next(), ',');
      if (f.size() != 3 || !absl::SimpleAtoi(f[0], &options.bm25_feedback.docs) ||
          !absl::SimpleAtoi(f[1], &options.bm25_feedback.terms) ||
          !absl::SimpleAtof(f[2], &options.bm25_feedback.weight)) {
        std::cerr << "--prf takes DOCS,TERMS,WEIGHT\n";
        return 2;
      }
    } else if (arg == "--rrf-k") {
      options.rrf_k = std::atoi(next().c_str());
    } else if (arg == "--near-dup") {
      if (!absl::SimpleAtod(next(), &options.near_duplicate_containment)) {
        std::cerr << "--near-dup takes a containment in [0, 1] (0 = off)\n";
        return 2;
      }
    } else if (arg == "--speed") {
      speed = true;
    } else {
      std::cerr << "usage: ragkv_bench_retrieval --corpus PATH [--embedder NAME[,NAME...]] "
                   "[--factory F] [--chunk-tokens N] [--speed] [--hash-seed S] [--questions BEGIN:END]\n"
                   "       [--prf DOCS,TERMS,WEIGHT] [--rrf-k K] [--near-dup C]\n"
                   "  embedders: default, hashed, hashed16k, hashed-char, bm25, hybrid, hybrid16k, hybrid-noprf, lexical\n";
      return 2;
    }
  }
  if (options.corpus_path.empty()) {
    std::cerr << "--corpus is required\n";
    return 2;
  }
  absl::Status s = ragkv::retrieval::RunRetrievalBench(options, std::cout);
  if (!s.ok()) {
    std::cerr << "bench retrieval: " << s << "\n";
    return 1;
  }
  if (speed) {
    ragkv::retrieval::RetrievalSpeedBenchOptions so;
    so.corpus_path = options.corpus_path;
    so.near_duplicate_containment = options.near_duplicate_containment;
    s = ragkv::retrieval::RunRetrievalSpeedBench(so, std::cout);
    if (!s.ok()) {
      std::cerr << "bench retrieval --speed: " << s << "\n";
      return 1;
    }
  }
  return 0;
}
