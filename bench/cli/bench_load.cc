// bench/cli/bench_load.cc: `ragkv bench load`: closed-loop Search/GetChunk/Blend load
// against a running sidecar (bench/services/bench_load.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "bench/services/bench_load.h"
#include "cli/command.h"
#include "cli/flags.h"

namespace ragkv::cli {
namespace {

class BenchLoadCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--server", o_.server)->capture_default_str();
    AddAuthTokenOptions(cmd, &auth_, "the sidecar's bearer token");
    cmd->add_option("--concurrency", o_.concurrency)->capture_default_str();
    cmd->add_option("--duration", o_.duration_s, "measured seconds")->capture_default_str();
    cmd->add_option("--warmup", o_.warmup_s, "seconds before measuring")->capture_default_str();
    cmd->add_option("--search-weight", o_.search_weight)->capture_default_str();
    cmd->add_option("--getchunk-weight", o_.getchunk_weight)->capture_default_str();
    cmd->add_option("--blend-weight", o_.blend_weight)->capture_default_str();
    cmd->add_option("--k", o_.top_k, "search hits per query")->capture_default_str();
    cmd->add_option("--query", o_.queries, "query text (repeatable; default a built-in list)");
    cmd->add_option("--server-pid", o_.server_pid, "report/limit this process's RSS");
    cmd->add_option("--max-rss-growth-mb", o_.max_rss_growth_mb)->capture_default_str();
  }
  int Run() override {
    absl::StatusOr<std::string> token = ResolveAuthToken(auth_, "ragkv bench load");
    if (!token.ok()) {
      std::fprintf(stderr, "ragkv bench load: %s\n", token.status().ToString().c_str());
      return 2;
    }
    o_.auth_token = *token;
    auto r = services::RunBenchLoad(o_);
    if (!r.ok()) {
      std::fprintf(stderr, "ragkv bench load: %s\n", r.status().ToString().c_str());
      return 2;
    }
    std::fputs(services::FormatBenchLoadReport(o_, *r).c_str(), stdout);
    return (r->total_errors == 0 && r->rss_within_bound) ? 0 : 1;
  }

 private:
  services::BenchLoadOptions o_;
  AuthTokenFlags auth_;
};

}  // namespace

std::unique_ptr<Command> NewBenchLoadCommand() { return std::make_unique<BenchLoadCommand>(); }

}  // namespace ragkv::cli
