#include "services/cli.h"

#include <CLI/CLI.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "absl/time/clock.h"
#include "connector/client.h"
#include "model/generate.h"
#include "model/loader.h"
#include "retrieval/bench_retrieval.h"
#include "services/backends.h"
#include "services/bench_cli.h"
#include "services/bench_load.h"
#include "services/model_embedder.h"
#include "services/precompute_job.h"
#include "services/ttft_cli.h"

namespace ragkv::services {
namespace {

struct PrecomputeFlags {
  std::vector<std::string> corpus;
  std::string model, tokenizer, server, data_dir, shard = "0/1";
  AuthTokenFlags auth;
  int workers = 1;
  int max_seq_len = 0;
  int chunk_tokens = 128;
  std::string ram = "1G";
  int debug_chunk_delay_ms = 0;
  bool sync_writes = false;
} g_pre;

struct QueryFlags {
  std::string server = "127.0.0.1:50051", question, mode = "cacheblend", format = "text";
  AuthTokenFlags auth;
  float ratio = 0.15f;
  uint32_t k = 3;
  uint32_t max_new_tokens = 32;
  bool add_bos = true;
  double deadline_s = 120;
} g_query;

model::GenerateOptions g_gen;
std::string g_gen_ids;
retrieval::RetrievalBenchOptions g_bench_retrieval;
CLI::App* g_generate = nullptr;
CLI::App* g_bench_retrieval_cmd = nullptr;
CLI::App* g_precompute = nullptr;
CLI::App* g_querycmd = nullptr;

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", b, units[u]);
}

// Progress: a live bar on a TTY, a log line every 5 s otherwise.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO)) {}
  void Update(const v1::Job& j) {
    const uint64_t processed = j.chunks_done() + j.chunks_skipped() + j.chunks_failed();
    if (tty_) {
      const int width = 30;
      const double frac = j.chunks_total() ? double(processed) / j.chunks_total() : 0;
      std::string bar(static_cast<int>(frac * width), '#');
      bar.resize(width, '.');
      std::fprintf(stderr, "\r[%s] %llu/%llu chunks  %.0f tok/s  ETA %.0fs   ", bar.c_str(),
                   (unsigned long long)processed, (unsigned long long)j.chunks_total(),
                   j.tokens_per_second(), j.eta_seconds());
      std::fflush(stderr);
    } else if (absl::Now() - last_ >= absl::Seconds(5) || JobManager::Terminal(j.state())) {
      last_ = absl::Now();
      std::fprintf(stderr, "precompute %s: %llu/%llu chunks (%llu skipped, %llu failed) %.0f tok/s ETA %.0fs\n",
                   v1::JobState_Name(j.state()).c_str(), (unsigned long long)processed,
                   (unsigned long long)j.chunks_total(), (unsigned long long)j.chunks_skipped(),
                   (unsigned long long)j.chunks_failed(), j.tokens_per_second(), j.eta_seconds());
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
  std::printf("  time       %.2f s\n", j.elapsed_seconds());
  for (const auto& f : j.failures()) {
    std::printf("  failed     %s: %s\n", f.chunk().c_str(), f.reason().c_str());
  }
  if (!j.error().empty()) std::printf("  error      %s\n", j.error().c_str());
  return j.state() == v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

int RunPrecompute() {
  const PrecomputeFlags& f = g_pre;
  v1::CorpusSpec spec;
  for (const auto& p : f.corpus) spec.add_paths(p);
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
  bo.sync_writes = f.sync_writes;
  auto backends = BuildBackends(bo);
  if (!backends.ok()) {
    std::fprintf(stderr, "ragkv precompute: %s\n", backends.status().ToString().c_str());
    return 1;
  }
  JobManager::Options jo;
  jo.model = (*backends)->model.get();
  jo.retriever = (*backends)->retriever.get();
  jo.store = (*backends)->store.get();
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

int RunQuery() {
  const QueryFlags& f = g_query;
  if (f.question.empty()) {
    std::fprintf(stderr, "ragkv query: --question is required\n");
    return 2;
  }
  v1::GenerateRequest req;
  req.set_question(f.question);
  req.set_k(f.k);
  req.set_max_new_tokens(f.max_new_tokens);
  v1::BlendOptions* b = req.mutable_blend();
  b->set_add_bos(f.add_bos);
  if (f.mode == "full" || f.mode == "full-prefill") {
    b->set_mode(v1::BLEND_MODE_FULL_PREFILL);
  } else if (f.mode == "prefix" || f.mode == "prefix-caching") {
    b->set_mode(v1::BLEND_MODE_PREFIX_CACHING);
  } else if (f.mode == "reuse" || f.mode == "full-reuse") {
    b->set_mode(v1::BLEND_MODE_FULL_REUSE);
  } else if (f.mode == "cacheblend" || f.mode == "blend") {
    b->set_mode(v1::BLEND_MODE_CACHEBLEND);
    b->set_recompute_ratio(f.ratio);
  } else {
    std::fprintf(stderr, "ragkv query: unknown --mode %s\n", f.mode.c_str());
    return 2;
  }
  ClientOptions co;
  co.target = f.server;
  absl::StatusOr<std::string> token = ResolveAuthToken(f.auth, "ragkv query");
  if (!token.ok()) {
    std::fprintf(stderr, "ragkv query: %s\n", token.status().ToString().c_str());
    return 2;
  }
  co.auth_token = *token;
  auto client = Client::Create(co);
  if (!client.ok()) {
    std::fprintf(stderr, "ragkv query: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto resp = (*client)->Generate(req, absl::Seconds(f.deadline_s));
  if (!resp.ok()) {
    std::fprintf(stderr, "ragkv query: %s\n", resp.status().ToString().c_str());
    return 1;
  }
  const v1::TtftBreakdown& t = resp->ttft();
  std::string ids;
  for (uint64_t id : resp->chunk_ids()) absl::StrAppend(&ids, ids.empty() ? "" : ",", id);
  if (f.format == "tsv") {
    std::printf("%s\t%s\t%u\t%u\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", f.mode.c_str(), ids.c_str(),
                resp->context_tokens(), resp->recomputed_tokens(), t.retrieve_ms(), t.fetch_ms(),
                t.blend_ms(), t.query_prefill_ms(), t.ttft_ms());
    return 0;
  }
  std::printf("chunks:  [%s]\n", ids.c_str());
  std::printf("answer:  %s\n", resp->answer().c_str());
  std::printf("context: %u tokens, %u recomputed (mode %s)\n", resp->context_tokens(),
              resp->recomputed_tokens(), f.mode.c_str());
  std::printf("TTFT:    %.2f ms = retrieve %.2f + fetch %.2f + blend %.2f + query prefill %.2f "
              "(+ overhead)\n",
              t.ttft_ms(), t.retrieve_ms(), t.fetch_ms(), t.blend_ms(), t.query_prefill_ms());
  std::printf("decode:  %.2f ms for %d tokens\n", t.decode_ms(), resp->answer_tokens_size());
  return 0;
}

int RunGenerateCmd() {
  if (!g_gen_ids.empty()) {
    auto ids = model::ParseIdList(g_gen_ids);
    if (!ids.ok()) {
      std::fprintf(stderr, "ragkv generate: %s\n", ids.status().ToString().c_str());
      return 2;
    }
    g_gen.prompt_ids = *ids;
  }
  absl::Status s = model::RunGenerate(g_gen, std::cout);
  if (!s.ok()) {
    std::fprintf(stderr, "ragkv generate: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

std::string g_bench_retrieval_model;
std::string g_bench_retrieval_tokenizer;

int RunBenchRetrievalCmd() {
  retrieval::RetrievalBenchOptions o = g_bench_retrieval;
  // --model adds the mean-pooled hidden-state embedder of that checkpoint
  // (and its hybrid with BM25) next to the built-in lines.
  std::unique_ptr<model::Model> m;
  std::unique_ptr<model::Tokenizer> tok;
  if (!g_bench_retrieval_model.empty()) {
    absl::StatusOr<std::unique_ptr<model::Model>> lm = model::LoadModel(g_bench_retrieval_model);
    if (!lm.ok()) {
      std::fprintf(stderr, "ragkv bench retrieval: %s\n", lm.status().ToString().c_str());
      return 1;
    }
    m = std::move(*lm);
    absl::StatusOr<std::string> tp = g_bench_retrieval_tokenizer.empty()
                                          ? model::DefaultTokenizerPath(g_bench_retrieval_model)
                                          : absl::StatusOr<std::string>(g_bench_retrieval_tokenizer);
    absl::StatusOr<std::unique_ptr<model::Tokenizer>> lt =
        tp.ok() ? model::LoadTokenizer(*tp) : absl::StatusOr<std::unique_ptr<model::Tokenizer>>(tp.status());
    if (!lt.ok()) {
      std::fprintf(stderr, "ragkv bench retrieval: %s\n", lt.status().ToString().c_str());
      return 1;
    }
    tok = std::move(*lt);
    absl::StatusOr<std::unique_ptr<ModelEmbedder>> e = ModelEmbedder::Create(m.get(), tok.get());
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
  return 0;
}

}  // namespace

void AddAuthTokenOptions(CLI::App* cmd, AuthTokenFlags* flags, std::string_view what) {
  cmd->add_option("--auth-token", flags->token,
                  std::string(what) +
                      " (visible in ps: prefer --auth-token-file or RAGKV_AUTH_TOKEN)");
  cmd->add_option("--auth-token-file", flags->file,
                  std::string(what) +
                      ", read from this file (mode 600; default: $RAGKV_AUTH_TOKEN)");
}

absl::StatusOr<std::string> ResolveAuthToken(const AuthTokenFlags& flags,
                                             std::string_view command) {
  if (!flags.token.empty() && !flags.file.empty()) {
    return absl::InvalidArgumentError("give --auth-token or --auth-token-file, not both");
  }
  if (!flags.file.empty()) {
    struct stat st;
    if (::stat(flags.file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError("--auth-token-file " + flags.file +
                                        ": not a readable regular file");
    }
    if (st.st_mode & (S_IROTH | S_IWOTH)) {
      return absl::InvalidArgumentError("--auth-token-file " + flags.file +
                                        ": readable or writable by other users (chmod 600 it)");
    }
    std::ifstream in(flags.file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) {
      return absl::InvalidArgumentError("--auth-token-file " + flags.file + ": cannot read");
    }
    std::string token(absl::StripTrailingAsciiWhitespace(ss.str()));
    if (token.empty()) {
      return absl::InvalidArgumentError("--auth-token-file " + flags.file + ": empty");
    }
    return token;
  }
  if (!flags.token.empty()) {
    RAGKV_LOG(WARNING) << command
                       << ": --auth-token is visible to every local user in the process list "
                          "(ps); prefer --auth-token-file PATH or RAGKV_AUTH_TOKEN";
    return flags.token;
  }
  const char* env = std::getenv("RAGKV_AUTH_TOKEN");
  return std::string(env ? absl::StripTrailingAsciiWhitespace(env) : "");
}

void ScrubTokenArgs(int argc, char** argv) {
  static constexpr char kFlag[] = "--auth-token";
  const size_t n = sizeof(kFlag) - 1;
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (std::strcmp(a, kFlag) == 0 && i + 1 < argc) {
      std::memset(argv[i + 1], 'x', std::strlen(argv[i + 1]));
      ++i;
    } else if (std::strncmp(a, kFlag, n) == 0 && a[n] == '=') {
      std::memset(a + n + 1, 'x', std::strlen(a + n + 1));
    }
  }
}

CLI::App* BenchCommand(CLI::App* app) {
  for (CLI::App* s : app->get_subcommands([](CLI::App* a) { return a->get_name() == "bench"; })) {
    return s;
  }
  CLI::App* bench = app->add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  return bench;
}

void RegisterSubcommands(CLI::App* app) {
  // generate (model/generate.h)
  g_generate = app->add_subcommand("generate", "run the model on a prompt (llama2.c run.c style)");
  g_generate->add_option("--model", g_gen.model_path, "checkpoint or synthetic:<spec>")->required();
  g_generate->add_option("--tokenizer", g_gen.tokenizer_path);
  g_generate->add_option("--prompt", g_gen.prompt);
  g_generate->add_option("--prompt-ids", g_gen_ids, "comma-separated token ids");
  g_generate->add_option("--max-new", g_gen.max_new)->capture_default_str();
  g_generate->add_option("--temperature", g_gen.sampler.temperature)->capture_default_str();
  g_generate->add_flag("--print-ids", g_gen.print_ids);
  g_generate->add_option("--max-seq-len", g_gen.max_seq_len);
  // bench retrieval (retrieval/bench_retrieval.h)
  CLI::App* bench = BenchCommand(app);
  g_bench_retrieval_cmd =
      bench->add_subcommand("retrieval", "answer recall of the retrieval configurations");
  g_bench_retrieval_cmd->add_option("--corpus", g_bench_retrieval.corpus_path,
                                    "MuSiQue-style JSON")->required();
  g_bench_retrieval_cmd->add_option("--embedder,--embedders", g_bench_retrieval.embedders)
      ->delimiter(',')->capture_default_str();
  g_bench_retrieval_cmd->add_option("--model", g_bench_retrieval_model,
                                    "also evaluate this checkpoint's mean-pooled hidden states");
  g_bench_retrieval_cmd->add_option("--tokenizer", g_bench_retrieval_tokenizer,
                                    "the --model's tokenizer (default: the model's own)");
  g_bench_retrieval_cmd->add_option("--chunk-tokens", g_bench_retrieval.chunk_tokens)
      ->capture_default_str();
  g_bench_retrieval_cmd->add_option("--factory", g_bench_retrieval.factory)->capture_default_str();

  PrecomputeFlags& p = g_pre;
  g_precompute = app->add_subcommand(
      "precompute", "ingest a corpus and store every chunk's KV (resumable, shardable)");
  g_precompute->add_option("--corpus", p.corpus, "corpus file or directory (repeatable)")->required();
  g_precompute->add_option("--model", p.model, "model checkpoint (local mode)");
  g_precompute->add_option("--tokenizer", p.tokenizer, "tokenizer (default: the model's)");
  auto* server = g_precompute->add_option("--server", p.server, "run the job on this sidecar");
  auto* dir = g_precompute->add_option("--data-dir", p.data_dir, "run locally against this data dir");
  server->excludes(dir);
  g_precompute->add_option("--shard", p.shard, "i/n: this worker's deterministic share")
      ->capture_default_str();
  g_precompute->add_option("--workers", p.workers, "parallel chunk workers")->capture_default_str();
  g_precompute->add_option("--max-seq-len", p.max_seq_len, "model context override");
  g_precompute->add_option("--chunk-tokens", p.chunk_tokens)->capture_default_str();
  AddAuthTokenOptions(g_precompute, &p.auth, "the --server's bearer token");
  g_precompute->add_option("--sync-writes", p.sync_writes,
                           "fsync every chunk (default off: kill -9 safe, flushed at the end)")
      ->capture_default_str();
  g_precompute->add_option("--debug-chunk-delay-ms", p.debug_chunk_delay_ms)
      ->group("");  // hidden testing seam

  QueryFlags& q = g_query;
  g_querycmd = app->add_subcommand("query", "ask the reference engine; prints chunks, answer, TTFT");
  g_querycmd->add_option("--server", q.server, "engine address")->capture_default_str();
  g_querycmd->add_option("--question", q.question)->required();
  g_querycmd->add_option("--mode", q.mode, "full|prefix|reuse|cacheblend")->capture_default_str();
  g_querycmd->add_option("--ratio", q.ratio, "CacheBlend recompute ratio")->capture_default_str();
  g_querycmd->add_option("--k", q.k, "retrieved chunks")->capture_default_str();
  g_querycmd->add_option("--max-new-tokens", q.max_new_tokens)->capture_default_str();
  g_querycmd->add_option("--add-bos", q.add_bos)->capture_default_str();
  AddAuthTokenOptions(g_querycmd, &q.auth, "the engine's bearer token");
  g_querycmd->add_option("--format", q.format, "text|tsv")->capture_default_str();
  g_querycmd->add_option("--deadline", q.deadline_s, "seconds")->capture_default_str();
  RegisterTtftSubcommands(app);  // bench ttft, plan (services/ttft_cli.h)
  RegisterLoadSubcommand(app);    // bench load (services/bench_load.h)
  RegisterBenchSubcommands(app);  // bench prefill|kvstore|blend|quality (services/bench_cli.h)
}

int RunSubcommands(const CLI::App& app) {
  if (int rc = 0; RunTtftSubcommands(&rc)) return rc;
  if (int rc = 0; RunLoadSubcommand(&rc)) return rc;
  if (int rc = 0; RunBenchSubcommands(&rc)) return rc;
  if (g_generate && g_generate->parsed()) return RunGenerateCmd();
  if (g_bench_retrieval_cmd && g_bench_retrieval_cmd->parsed()) return RunBenchRetrievalCmd();
  if (g_precompute && g_precompute->parsed()) return RunPrecompute();
  if (g_querycmd && g_querycmd->parsed()) return RunQuery();
  std::fprintf(stderr, "ragkv: unknown subcommand\n");
  return 2;
}

}  // namespace ragkv::services
