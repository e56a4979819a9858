// bench/cli/bench_ttft.cc: `ragkv bench ttft`: TTFT of every strategy x KV tier on the
// same prompts, in process and over gRPC, under load, against the planner
// (bench/services/bench_ttft.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "bench/services/bench_ttft.h"
#include "kvstore/kv_chunk.h"
#include "cli/command.h"
#include "cli/flags.h"

namespace ragkv::cli {
namespace {

class BenchTtftCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--model", o_.model_spec, "checkpoint or synthetic:... spec")
        ->capture_default_str();
    cmd->add_option("--max-seq-len", o_.max_seq_len, "context override");
    cmd->add_option("--tokenizer", o_.tokenizer, "corpus mode tokenizer");
    cmd->add_option("--corpus", o_.corpus, "MuSiQue-style JSON (default: synthetic shapes)");
    cmd->add_option("--split", o_.split, "corpus questions: dev|test|all (docs/quality_gate.md)")
        ->capture_default_str();
    cmd->add_option("--prompts", o_.prompts)->capture_default_str();
    cmd->add_option("--chunks", o_.chunks)->capture_default_str();
    cmd->add_option("--chunk-tokens", o_.chunk_tokens)->capture_default_str();
    cmd->add_option("--query-tokens", o_.query_tokens)->capture_default_str();
    cmd->add_option("--ratios", o_.ratios, "CacheBlend ratios")->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--r-min", o_.r_min, "controller quality floor")->capture_default_str();
    cmd->add_option("--tiers", o_.tiers, "ram,ssd,redis")->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--repeats", o_.repeats, "passes over the prompts")->capture_default_str();
    cmd->add_option("--kv-dtype", kv_, "f16|bf16|f32")->capture_default_str();
    cmd->add_option("--kv-codec", codec_, "codec of the in-process tiers' records: raw|int8|fp8|int4")
        ->check(CLI::IsMember({"raw", "int8", "fp8", "int4"}))
        ->capture_default_str();
    cmd->add_option("--ssd-cold", o_.ssd_cold, "auto|drop|fadvise|direct|none")
        ->capture_default_str();
    cmd->add_option("--redis", o_.redis, "host:port (default: a private redis-server)");
    cmd->add_option("--work-dir", o_.work_dir, "scratch dir (default: fresh /tmp dir)");
    cmd->add_option("--concurrency", o_.concurrency, "load levels")->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--load-requests", o_.load_requests, "requests per load level")
        ->capture_default_str();
    cmd->add_option("--load-ratio", o_.load_ratio, "ratio of load/sweep/multi-user")
        ->capture_default_str();
    cmd->add_option("--context-sweep", o_.context_sweep, "chunk counts")->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--multi-user", o_.multi_user_requests, "requests (0: off)")
        ->capture_default_str();
    cmd->add_option("--pool-chunks", o_.pool_chunks)->capture_default_str();
    cmd->add_option("--ram-budget-chunks", o_.ram_budget_chunks)->capture_default_str();
    cmd->add_option("--zipf", o_.zipf_s)->capture_default_str();
    cmd->add_option("--multi-user-concurrency", o_.multi_user_concurrency)
        ->capture_default_str();
    cmd->add_option("--quality-prompts", o_.quality_prompts,
                           "quality bench prompts on the same model (0: off)")
        ->capture_default_str();
    cmd->add_option("--path", o_.path,
                           "inproc|grpc|both: in-process Blender and/or client -> sidecar engine "
                           "over loopback gRPC")
        ->capture_default_str();
    cmd->add_option("--calibrate-every", o_.calibrate_every,
                           "re-measure kernel rates every N matrix requests (0: once)")
        ->capture_default_str();
    cmd->add_option("--out", o_.out_dir, "CSV/JSON/Markdown/PNG output dir");
    cmd->add_option("--plots", o_.plots)->capture_default_str();
    cmd->add_option("--seed", o_.seed)->capture_default_str();
  }
  int Run() override {
    services::TtftBenchOptions o = o_;
    if (!ParseKvDtype(kv_, &o.kv_dtype)) {
      std::fprintf(stderr, "ragkv bench ttft: --kv-dtype must be f16, bf16 or f32\n");
      return 2;
    }
    o.kv_codec = *kvstore::ParseCodec(codec_);  // checked by the flag
    absl::StatusOr<services::TtftReport> r = services::RunTtftBench(o, std::cout);
    if (!r.ok()) {
      std::fprintf(stderr, "ragkv bench ttft: %s\n", r.status().ToString().c_str());
      return 1;
    }
    return 0;
  }

 private:
  services::TtftBenchOptions o_;
  std::string kv_ = "f16", codec_ = "raw";
};

}  // namespace

std::unique_ptr<Command> NewBenchTtftCommand() { return std::make_unique<BenchTtftCommand>(); }

}  // namespace ragkv::cli
