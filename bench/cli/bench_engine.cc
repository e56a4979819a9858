// bench/cli/bench_engine.cc: `ragkv bench engine --engine llama.cpp`: TTFT
// and quality of every strategy inside llama.cpp (bench/engine/
// bench_engine.h). Runs in ragkv-llama (`ragkv bench engine` execs it).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/engine/bench_engine.h"
#include "cli/command.h"

namespace ragkv::cli {
namespace {

class BenchEngineCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--engine", o_.engine, "llama.cpp")->capture_default_str();
    cmd->add_option("--model", o_.model, "GGUF (default: --synthetic written as --encoding)");
    cmd->add_option("--synthetic", o_.synthetic, "synthetic shape")->capture_default_str();
    cmd->add_option("--encoding", o_.encoding, "synthetic GGUF encoding: f32|f16|q8_0|q4_k_m|...")
        ->capture_default_str();
    cmd->add_option("--task", o_.task,
                    "text: --corpus or synthetic shapes; xchunk: the cross-chunk task's passages "
                    "as documents (a checkpoint trained on it as --model; --pairs, --chunks; "
                    "odd --seed dev, even test)")
        ->capture_default_str();
    cmd->add_option("--pairs", o_.pairs, "xchunk: key/value pairs per prompt")->capture_default_str();
    cmd->add_option("--corpus", o_.corpus, "MuSiQue-style JSON (default: synthetic shapes)");
    cmd->add_option("--split", o_.split,
                    "corpus questions: dev (tune here) | test (report what dev chose) | all; "
                    "docs/quality_gate.md \"The dev/test split\"")
        ->capture_default_str();
    cmd->add_option("--prompts", o_.prompts, "the first N questions of --split (all, if fewer)")
        ->capture_default_str();
    cmd->add_option("--chunks", o_.chunks)->capture_default_str();
    cmd->add_option("--chunk-tokens", o_.chunk_tokens)->capture_default_str();
    cmd->add_option("--query-tokens", o_.query_tokens)->capture_default_str();
    cmd->add_option("--passages", o_.passages,
                    "corpus passages: chunker (the sidecar's first chunk of each passage text) | "
                    "cut (its tokens cut to --chunk-tokens, sent as documents: bench quality's "
                    "prompts)")
        ->capture_default_str();
    cmd->add_option("--ratios", o_.ratios, "CacheBlend ratios")->delimiter(',')->capture_default_str();
    cmd->add_option("--selectors", o_.selectors,
                    "CacheBlend row selectors, each at every ratio (default: the sidecar's)")
        ->delimiter(',');
    cmd->add_option("--chunk-head-tokens", o_.chunk_head_tokens,
                    "CacheBlend also recomputes each chunk's first N rows (EPIC)")
        ->capture_default_str();
    cmd->add_option("--lookahead-layers", o_.lookahead_layers,
                    "extra CacheBlend strategies, one per look-ahead horizon (layers past each "
                    "check; the lookahead-deviation selector)");
    cmd->add_option("--adaptive-masses", o_.adaptive_masses,
                    "adaptive CacheBlend strategies: the share of the estimated error to remove")
        ->delimiter(',');
    cmd->add_option("--adaptive-thresholds", o_.adaptive_thresholds,
                    "adaptive CacheBlend strategies by the threshold rule (1.6e-4 chosen on dev)")
        ->delimiter(',');
    cmd->add_option("--adaptive-budgets", o_.adaptive_budgets,
                    "adaptive CacheBlend strategies by the budget rule: the mean ratio each "
                    "spends over its prompts")
        ->delimiter(',');
    cmd->add_flag("--first-position-records", o_.first_position_records,
                  "serve each prompt's first chunk from its first-position record (its KV "
                  "computed right after the prompt's prefix), written by store-back in a warm "
                  "pass before the recorded rounds");
    cmd->add_option("--adaptive-max", o_.adaptive_max, "the adaptive strategies' ratio cap")
        ->capture_default_str();
    cmd->add_option("--sidecar-query", o_.sidecar_query,
                    "first: the sidecar blends the query's first token, llama.cpp prefills the "
                    "query (TTFT includes it); all: every token but the last, as the OpenAI "
                    "server does (TTFT on that served path)")
        ->capture_default_str();
    cmd->add_option("--threads", o_.threads, "llama.cpp and ragkv threads")->capture_default_str();
    cmd->add_option("--repeats", o_.repeats, "rounds over the prompts")->capture_default_str();
    cmd->add_option("--tiers", o_.tiers, "the sidecar's KV tiers: ram|ssd")->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--out-dir", o_.out_dir, "samples.csv, summary.json, ttft.png");
    cmd->add_option("--scratch-dir", o_.scratch_dir, "default: a fresh /tmp dir");
    cmd->add_option("--seed", o_.seed)->capture_default_str();
    app_ = cmd;
  }
  int Run() override {
    auto r = bench::RunEngineBench(o_, std::cerr);
    if (!r.ok()) {
      std::fprintf(stderr, "ragkv bench engine: %s\n", r.status().ToString().c_str());
      return r.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    r->command = CommandLine();
    bench::PrintEngineBench(*r, std::cout);
    if (!o_.out_dir.empty()) {
      if (absl::Status s = bench::WriteEngineBenchFiles(*r, o_.out_dir); !s.ok()) {
        std::fprintf(stderr, "ragkv bench engine: %s\n", s.ToString().c_str());
        return 1;
      }
    }
    return 0;
  }

 private:
  // CommandLine: the options given, as typed (the report says what ran).
  std::string CommandLine() const {
    std::string s = "ragkv bench engine";
    for (const CLI::Option* opt : app_->get_options()) {
      if (opt->count() == 0 || opt->get_lnames().empty()) continue;
      absl::StrAppend(&s, " --", opt->get_lnames()[0], " ", absl::StrJoin(opt->results(), ","));
    }
    return s;
  }

  bench::EngineBenchOptions o_;
  CLI::App* app_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> NewBenchEngineCommand() { return std::make_unique<BenchEngineCommand>(); }

}  // namespace ragkv::cli
