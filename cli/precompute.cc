// precompute.cc: `ragkv precompute`: chunk a corpus, prefill and store every
// chunk's KV, on a sidecar (--server, watched with a progress bar) or
// locally against a data dir. Resumable and shardable (services/precompute_job.h).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/command.h"
#include "cli/config_file.h"
#include "cli/flags.h"
#include "cli/store_flags.h"
#include "connector/client.h"
#include "kvstore/kv_chunk.h"
#include "services/backends.h"
#include "services/precompute_job.h"

namespace ragkv::cli {
namespace {

using services::BackendOptions;
using services::BuildBackends;
using services::JobManager;

// Progress: a live bar on a TTY, a log line every 5 s otherwise.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO)) {}
  void Update(const v1::Job& j) {
    // The plain chunks, then (CorpusSpec.neighbours > 0) the neighbour pass;
    // the ETA and tok/s are the whole job's (docs/protocol.md "Job progress").
    const bool nbr = j.has_neighbour_pass();
    const v1::NeighbourPass& p = j.neighbour_pass();
    const char* what = nbr ? "neighbour records" : "chunks";
    const uint64_t total = nbr ? p.chunks_total() : j.chunks_total();
    const uint64_t skipped = nbr ? p.chunks_skipped() : j.chunks_skipped();
    const uint64_t failed = nbr ? p.chunks_failed() : j.chunks_failed();
    const uint64_t processed = (nbr ? p.chunks_done() : j.chunks_done()) + skipped + failed;
    if (tty_) {
      const int width = 30;
      const double frac = total ? double(processed) / total : 0;
      std::string bar(static_cast<int>(frac * width), '#');
      bar.resize(width, '.');
      std::fprintf(stderr, "\r[%s] %llu/%llu %s  %.0f tok/s  ETA %.0fs   ", bar.c_str(),
                   (unsigned long long)processed, (unsigned long long)total, what,
                   j.tokens_per_second(), j.eta_seconds());
      std::fflush(stderr);
    } else if (absl::Now() - last_ >= absl::Seconds(5) || JobManager::Terminal(j.state())) {
      last_ = absl::Now();
      std::fprintf(stderr, "precompute %s: %llu/%llu %s (%llu skipped, %llu failed) %.0f tok/s\n",
                   v1::JobState_Name(j.state()).c_str(), (unsigned long long)processed,
                   (unsigned long long)total, what, (unsigned long long)skipped,
                   (unsigned long long)failed, j.tokens_per_second());
    }
  }
  void Done() {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_;
  absl::Time last_ = absl::InfinitePast();
};

int PrintSummary(const v1::Job& j) {
  std::printf("precompute %s: %s\n", j.job_id().c_str(), v1::JobState_Name(j.state()).c_str());
  std::printf("  documents  %llu\n", (unsigned long long)j.documents());
  std::printf("  chunks     %llu total, %llu computed, %llu skipped (already stored), %llu failed\n",
              (unsigned long long)j.chunks_total(), (unsigned long long)j.chunks_done(),
              (unsigned long long)j.chunks_skipped(), (unsigned long long)j.chunks_failed());
  std::printf("  tokens     %llu (%.0f tok/s)\n", (unsigned long long)j.tokens_done(),
              j.tokens_per_second());
  std::printf("  bytes      %s\n", HumanBytes(static_cast<double>(j.bytes_stored())).c_str());
  if (j.has_neighbour_pass()) {
    const v1::NeighbourPass& p = j.neighbour_pass();
    std::printf("  neighbours k=%u: %llu chunks, %llu computed, %llu skipped, %llu failed; %s "
                "(mean context %.0f tokens)\n",
                p.k(), (unsigned long long)p.chunks_total(), (unsigned long long)p.chunks_done(),
                (unsigned long long)p.chunks_skipped(), (unsigned long long)p.chunks_failed(),
                HumanBytes(static_cast<double>(p.bytes_stored())).c_str(),
                p.chunks_done() ? static_cast<double>(p.context_tokens()) / p.chunks_done() : 0.0);
  }
  std::printf("  time       %.2f s\n", j.elapsed_seconds());
  for (const auto& f : j.failures()) {
    std::printf("  failed     %s: %s\n", f.chunk().c_str(), f.reason().c_str());
  }
  if (!j.error().empty()) std::printf("  error      %s\n", j.error().c_str());
  return j.state() == v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

class PrecomputeCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    app_ = cmd;
    cmd->add_option("--corpus", f_.corpus, "corpus file or directory (repeatable)")->required();
    auto* server = cmd->add_option("--server", f_.server, "run the job on this sidecar");
    auto* dir = cmd->add_option("--data-dir", f_.data_dir, "run locally against this data dir");
    server->excludes(dir);
    cmd->add_option("--shard", f_.shard, "i/n: this worker's deterministic share")
        ->capture_default_str();
    cmd->add_option("--workers", f_.workers, "parallel chunk workers")->capture_default_str();
    AddAuthTokenOptions(cmd, &f_.auth, "the --server's bearer token");
    cmd->add_flag("--replace", f_.replace,
                  "recompute and rewrite chunks already stored (records you do not trust)");
    cmd->add_option("--neighbours", f_.neighbours,
                    "also store each chunk's neighbour-aware record, computed after its k "
                    "nearest chunks in the index, after the plain records (docs/kv_format.md "
                    "\"Neighbour-aware records\"; serve them with `ragkv serve --neighbour-records k`)")
        ->check(CLI::Range(0, static_cast<int>(JobManager::kMaxNeighbours)))
        ->capture_default_str();
    cmd->add_option("--debug-chunk-delay-ms", f_.debug_chunk_delay_ms)
        ->group("");  // hidden testing seam
    // Local mode only, from here on: with --server, Run refuses each of these.
    const size_t first_local = cmd->get_options().size();
    cmd->add_option("--model", f_.model, "local: model checkpoint");
    cmd->add_option("--tokenizer", f_.tokenizer, "local: tokenizer (default: the model's)");
    cmd->add_option("--max-seq-len", f_.max_seq_len, "local: model context override");
    cmd->add_option("--chunk-tokens", f_.chunk_tokens, "local: tokens per retrieval chunk")
        ->capture_default_str();
    AddRetrievalOptions(cmd, &f_.retrieval, "local: ");
    cmd->add_option("--sync-writes", f_.sync_writes,
                             "local: fsync every chunk (default off: kill -9 safe, flushed at the end)")
        ->capture_default_str();
    // Local mode's store: the same options as `ragkv serve`, and its config file.
    AddStoreOptions(cmd, &f_.store, "local: ");
    cmd->add_option("--config", f_.config,
                    "local: a `ragkv serve` TOML file; its store settings apply (flags given "
                    "here win), its server-only keys are ignored");
    const std::vector<CLI::Option*> all = cmd->get_options();
    local_options_.assign(all.begin() + static_cast<std::ptrdiff_t>(first_local), all.end());
  }
  int Run() override;

 private:
  struct Flags {
    std::vector<std::string> corpus;
    std::string model, tokenizer, server, data_dir, shard = "0/1";
    AuthTokenFlags auth;
    int workers = 1;
    int max_seq_len = 0;
    int chunk_tokens = 128;
    int neighbours = 0;
    StoreFlags store;
    services::RetrievalSettings retrieval;
    std::string config;
    int debug_chunk_delay_ms = 0;
    bool sync_writes = false;
    bool replace = false;
  };
  Flags f_;
  CLI::App* app_ = nullptr;
  std::vector<const CLI::Option*> local_options_;  // refused with --server
};

int PrecomputeCommand::Run() {
  if (!f_.server.empty()) {
    for (const CLI::Option* o : local_options_) {
      if (o->count() == 0) continue;
      std::fprintf(stderr,
                   "ragkv precompute: %s applies to local mode (--data-dir); the sidecar at "
                   "--server runs the job with its own model, store and retrieval settings\n",
                   o->get_name().c_str());
      return 2;
    }
  }
  if (!f_.config.empty()) {
    // The server's file: keys only `ragkv serve` has are skipped.
    CLI::App serve_app;
    std::unique_ptr<Command> serve = NewServeCommand();
    serve->Register(&serve_app);
    if (absl::Status s = ApplyConfigFile(app_, f_.config, &serve_app); !s.ok()) {
      std::fprintf(stderr, "ragkv precompute: --config %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  const Flags& f = f_;
  v1::CorpusSpec spec;
  for (const auto& p : f.corpus) spec.add_paths(p);
  spec.set_replace(f.replace);
  spec.set_neighbours(static_cast<uint32_t>(f.neighbours));
  std::vector<std::string> parts = absl::StrSplit(f.shard, '/');
  uint32_t si = 0, sn = 1;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &si) || !absl::SimpleAtoi(parts[1], &sn) ||
      sn == 0 || si >= sn) {
    std::fprintf(stderr, "ragkv precompute: --shard must be i/n with 0 <= i < n\n");
    return 2;
  }
  spec.set_shard_index(si);
  spec.set_shard_count(sn);
  Progress progress;
  if (!f.server.empty()) {
    ClientOptions co;
    co.target = f.server;
    absl::StatusOr<std::string> token = ResolveAuthToken(f.auth, "ragkv precompute");
    if (!token.ok()) {
      std::fprintf(stderr, "ragkv precompute: %s\n", token.status().ToString().c_str());
      return 2;
    }
    co.auth_token = *token;
    co.default_deadline = absl::Hours(24 * 7);
    auto client = Client::Create(co);
    if (!client.ok()) {
      std::fprintf(stderr, "ragkv precompute: %s\n", client.status().ToString().c_str());
      return 1;
    }
    v1::StartJobRequest req;
    *req.mutable_corpus() = spec;
    req.set_workers(f.workers);
    auto job = (*client)->StartJob(req, absl::Seconds(60));
    if (!job.ok()) {
      std::fprintf(stderr, "ragkv precompute: %s\n", job.status().ToString().c_str());
      return 1;
    }
    auto last = (*client)->WatchJob(job->job_id(), [&](const v1::Job& j) {
      progress.Update(j);
      return true;
    });
    progress.Done();
    if (!last.ok()) {
      std::fprintf(stderr, "ragkv precompute: %s\n", last.status().ToString().c_str());
      return 1;
    }
    return PrintSummary(*last);
  }
  if (f.model.empty()) {
    std::fprintf(stderr, "ragkv precompute: --model is required with --data-dir\n");
    return 2;
  }
  BackendOptions bo;
  bo.data_dir = f.data_dir.empty() ? "./ragkv-data" : f.data_dir;
  bo.model_path = f.model;
  bo.tokenizer_path = f.tokenizer;
  bo.max_seq_len = f.max_seq_len;
  bo.chunk_tokens = f.chunk_tokens;
  bo.retrieval = f.retrieval;
  bo.sync_writes = f.sync_writes;
  absl::StatusOr<ResolvedStore> store = ResolveStoreFlags(f.store);
  if (!store.ok()) {
    std::fprintf(stderr, "ragkv precompute: %s\n", std::string(store.status().message()).c_str());
    return 2;
  }
  bo.ram_budget_bytes = store->ram_budget_bytes;
  bo.ssd_budget_bytes = store->ssd_budget_bytes;
  bo.redis_url = store->redis_url;
  bo.redis = store->redis;
  bo.kv_tiers = store->kv_tiers;
  auto backends = BuildBackends(bo);
  if (!backends.ok()) {
    std::fprintf(stderr, "ragkv precompute: %s\n", backends.status().ToString().c_str());
    return 1;
  }
  JobManager::Options jo;
  jo.model = (*backends)->model.get();
  jo.tokenizer = (*backends)->tokenizer.get();
  jo.retriever = (*backends)->retriever.get();
  jo.store = (*backends)->store.get();
  jo.kv_codec = *kvstore::ParseCodec(store->kv_codec);  // checked by the flag
  jo.chunk_delay = absl::Milliseconds(f.debug_chunk_delay_ms);
  JobManager jobs(jo);
  auto id = jobs.Start(spec, f.workers);
  if (!id.ok()) {
    std::fprintf(stderr, "ragkv precompute: %s\n", id.status().ToString().c_str());
    return 1;
  }
  uint64_t version = 0;
  v1::Job last;
  for (;;) {
    auto j = jobs.WaitForUpdate(*id, &version, absl::Milliseconds(500));
    if (!j.ok()) break;
    last = *j;
    progress.Update(last);
    if (JobManager::Terminal(last.state())) break;
  }
  progress.Done();
  return PrintSummary(last);
}

}  // namespace

std::unique_ptr<Command> NewPrecomputeCommand() { return std::make_unique<PrecomputeCommand>(); }

}  // namespace ragkv::cli
