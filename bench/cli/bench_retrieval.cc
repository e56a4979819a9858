// bench/cli/bench_retrieval.cc: `ragkv bench retrieval`: answer recall@k of the
// retrieval configurations on a MuSiQue-style corpus, and with --speed the
// search QPS of ragkv's index against raw FAISS (bench/retrieval/).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/retrieval/bench_retrieval.h"
#include "cli/command.h"
#include "model/loader.h"
#include "services/model_embedder.h"

namespace ragkv::cli {
namespace {

class BenchRetrievalCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--corpus", o_.corpus_path, "MuSiQue-style JSON")->required();
    cmd->add_option("--embedder,--embedders", o_.embedders)->delimiter(',')->capture_default_str();
    cmd->add_option("--model", model_, "also evaluate this checkpoint's mean-pooled hidden states");
    cmd->add_option("--tokenizer", tokenizer_, "the --model's tokenizer (default: the model's own)");
    cmd->add_option("--chunk-tokens", o_.chunk_tokens)->capture_default_str();
    cmd->add_option("--factory", o_.factory)->capture_default_str();
    cmd->add_option("--hash-seed", o_.hash_seed, "hashed embedders' seed")->capture_default_str();
    cmd->add_option("--questions", questions_, "BEGIN:END (0-based, END exclusive; default all)");
    cmd->add_option("--prf", prf_, "BM25 pseudo-relevance feedback DOCS,TERMS,WEIGHT");
    cmd->add_option("--rrf-k", o_.rrf_k)->capture_default_str();
    cmd->add_option("--near-dup", o_.near_duplicate_containment,
                    "near-duplicate containment threshold in [0, 1] (0 = off)")
        ->capture_default_str();
    cmd->add_flag("--speed", speed_, "also search QPS vs raw FAISS and ingest throughput");
  }
  int Run() override;

 private:
  bool ParseExtras(retrieval::RetrievalBenchOptions* o) const;

  retrieval::RetrievalBenchOptions o_;
  std::string model_, tokenizer_, questions_, prf_;
  bool speed_ = false;
};

bool BenchRetrievalCommand::ParseExtras(retrieval::RetrievalBenchOptions* o) const {
  if (!questions_.empty()) {
    const std::vector<std::string> be = absl::StrSplit(questions_, ':');
    if (be.size() != 2 || !absl::SimpleAtoi(be[0], &o->question_begin) ||
        !absl::SimpleAtoi(be[1], &o->question_end)) {
      std::fprintf(stderr, "ragkv bench retrieval: --questions takes BEGIN:END\n");
      return false;
    }
  }
  if (!prf_.empty()) {
    const std::vector<std::string> f = absl::StrSplit(prf_, ',');
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &o->bm25_feedback.docs) ||
        !absl::SimpleAtoi(f[1], &o->bm25_feedback.terms) ||
        !absl::SimpleAtof(f[2], &o->bm25_feedback.weight)) {
      std::fprintf(stderr, "ragkv bench retrieval: --prf takes DOCS,TERMS,WEIGHT\n");
      return false;
    }
  }
  return true;
}

int BenchRetrievalCommand::Run() {
  retrieval::RetrievalBenchOptions o = o_;
  if (!ParseExtras(&o)) return 2;
  // --model adds the mean-pooled hidden-state embedder of that checkpoint
  // (and its hybrid with BM25) next to the built-in lines.
  std::unique_ptr<model::Model> m;
  std::unique_ptr<model::Tokenizer> tok;
  if (!model_.empty()) {
    absl::StatusOr<std::unique_ptr<model::Model>> lm = model::LoadModel(model_);
    if (!lm.ok()) {
      std::fprintf(stderr, "ragkv bench retrieval: %s\n", lm.status().ToString().c_str());
      return 1;
    }
    m = std::move(*lm);
    absl::StatusOr<std::string> tp = tokenizer_.empty()
                                          ? model::DefaultTokenizerPath(model_)
                                          : absl::StatusOr<std::string>(tokenizer_);
    absl::StatusOr<std::unique_ptr<model::Tokenizer>> lt =
        tp.ok() ? model::LoadTokenizer(*tp) : absl::StatusOr<std::unique_ptr<model::Tokenizer>>(tp.status());
    if (!lt.ok()) {
      std::fprintf(stderr, "ragkv bench retrieval: %s\n", lt.status().ToString().c_str());
      return 1;
    }
    tok = std::move(*lt);
    absl::StatusOr<std::unique_ptr<services::ModelEmbedder>> e = services::ModelEmbedder::Create(m.get(), tok.get());
    if (!e.ok()) {
      std::fprintf(stderr, "ragkv bench retrieval: %s\n", e.status().ToString().c_str());
      return 1;
    }
    o.extra_embedders.emplace_back("model", std::shared_ptr<const retrieval::Embedder>(std::move(*e)));
  }
  absl::Status s = retrieval::RunRetrievalBench(o, std::cout);
  if (!s.ok()) {
    std::fprintf(stderr, "ragkv bench retrieval: %s\n", s.ToString().c_str());
    return 1;
  }
  if (!speed_) return 0;
  retrieval::RetrievalSpeedBenchOptions so;
  so.corpus_path = o.corpus_path;
  so.near_duplicate_containment = o.near_duplicate_containment;
  s = retrieval::RunRetrievalSpeedBench(so, std::cout);
  if (!s.ok()) {
    std::fprintf(stderr, "ragkv bench retrieval --speed: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewBenchRetrievalCommand() {
  return std::make_unique<BenchRetrievalCommand>();
}

}  // namespace ragkv::cli
