// bench/cli/bench_serve.cc: `ragkv bench serve`: the OpenAI server under
// closed-loop load against llama-server (bench/serve/bench_serve.h).
#include "bench/serve/bench_serve.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"

namespace ragkv::cli {
namespace {

class BenchServeCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    bench_serve::WorkloadOptions& w = o_.workload;
    w.corpus = "../shared/corpus/musique_dev.json";
    cmd->add_option("--model", o_.model, "GGUF (default: --synthetic written as --encoding)");
    cmd->add_option("--synthetic", o_.synthetic, "synthetic shape, or a moe: / gemma3: spec")
        ->capture_default_str();
    cmd->add_option("--encoding", o_.encoding, "synthetic GGUF encoding: f16|q4_k_m|...")
        ->capture_default_str();
    cmd->add_option("--corpus", w.corpus, "MuSiQue-style JSON (the passage pool)")
        ->capture_default_str();
    cmd->add_option("--passage-tokens", w.passage_tokens, "passages cut to this many tokens")
        ->capture_default_str();
    cmd->add_option("--k", w.k, "passages per request")->capture_default_str();
    cmd->add_option("--zipf", w.zipf_s, "passage popularity exponent")->capture_default_str();
    cmd->add_option("--documents-share", w.documents_share,
                    "share of requests sending `documents` (the rest paste)")
        ->capture_default_str();
    cmd->add_option("--seed", w.seed)->capture_default_str();
    cmd->add_option("--servers", o_.servers,
                    "ragkv,ragkv-local,llama-server[,ragkv-reorder][,ragkv-first]")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--clients", o_.clients, "closed-loop concurrency levels")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--requests", o_.requests, "measured requests per cell")->capture_default_str();
    cmd->add_option("--warmup", o_.warmup, "warm-up requests (every server)")
        ->capture_default_str();
    cmd->add_option("--repeats", o_.repeats, "same-prompt / new-question pairs (0: off)")
        ->capture_default_str();
    cmd->add_option("--slots", o_.slots, "--parallel / -np of every server")->capture_default_str();
    cmd->add_option("--ctx-per-slot", o_.ctx_per_slot, "context cells per slot")
        ->capture_default_str();
    cmd->add_option("--threads", o_.threads, "threads of every server")->capture_default_str();
    cmd->add_option("--max-tokens", o_.max_tokens, "output tokens per request")
        ->capture_default_str();
    cmd->add_option("--precompute", o_.precompute, "the run's passages warm in ragkv's store first")
        ->capture_default_str();
    cmd->add_option("--ragkv-bin", o_.ragkv_bin, "default: ragkv beside this binary");
    cmd->add_option("--llama-server", o_.llama_server,
                    "default: the build of scripts/setup-llamacpp --server");
    cmd->add_option("--work-dir", o_.work_dir, "default: a fresh temp dir, removed after");
    cmd->add_option("--out-dir", o_.out_dir, "serve.csv, serve.json, serve_ttft.png");
    cmd->add_option("--request-timeout", o_.request_timeout_s, "seconds")->capture_default_str();
    cmd->add_option(
        "--ragkv-mode", o_.ragkv_mode,
        "ragkv.mode of the ragkv, ragkv-reorder and ragkv-first requests (default: the server's)");
  }
  int Run() override {
    auto r = bench_serve::RunServeBench(o_, std::cerr);
    if (!r.ok()) {
      std::fprintf(stderr, "ragkv bench serve: %s\n", r.status().ToString().c_str());
      return r.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    if (!o_.out_dir.empty()) {
      if (absl::Status s = bench_serve::WriteServeFiles(o_.out_dir, &*r); !s.ok()) {
        std::fprintf(stderr, "ragkv bench serve: %s\n", s.ToString().c_str());
        return 1;
      }
    }
    std::cout << bench_serve::FormatServeReport(*r) << std::flush;
    return r->total_errors == 0 ? 0 : 1;
  }

 private:
  bench_serve::ServeBenchOptions o_;
};

}  // namespace

std::unique_ptr<Command> NewBenchServeCommand() { return std::make_unique<BenchServeCommand>(); }

}  // namespace ragkv::cli
