// main.cc: the `ragkv` command line: serve, precompute, query, ...
// Flags are parsed here only; libraries take Options structs.
#include <CLI/CLI.hpp>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_split.h"
#include "base/log.h"
#include "kernels/cpu.h"
#include "services/cli.h"
#include "services/sidecar.h"

namespace {

using ragkv::services::SidecarOptions;

uint64_t ParseBytes(const std::string& s) {
  // Accepts plain bytes or a K/M/G/T suffix (binary).
  if (s.empty()) return 0;
  uint64_t mult = 1;
  std::string num = s;
  switch (s.back()) {
    case 'K': case 'k': mult = 1ull << 10; num.pop_back(); break;
    case 'M': case 'm': mult = 1ull << 20; num.pop_back(); break;
    case 'G': case 'g': mult = 1ull << 30; num.pop_back(); break;
    case 'T': case 't': mult = 1ull << 40; num.pop_back(); break;
    default: break;
  }
  return static_cast<uint64_t>(std::stod(num) * static_cast<double>(mult));
}

int RunServe(SidecarOptions o, const std::string& services, const std::string& ram,
             const std::string& ssd) {
  if (!services.empty() && services != "all") {
    o.services.clear();
    for (auto s : absl::StrSplit(services, ',', absl::SkipEmpty())) o.services.insert(std::string(s));
  }
  o.ram_budget_bytes = ParseBytes(ram);
  o.ssd_budget_bytes = ParseBytes(ssd);
  // SIGTERM/SIGINT are taken synchronously by this thread (sigwait); block
  // them before any other thread exists so no worker receives them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto sidecar = ragkv::services::Sidecar::Start(std::move(o));
  if (!sidecar.ok()) {
    std::fprintf(stderr, "ragkv serve: %s\n", sidecar.status().ToString().c_str());
    return 1;
  }
  // Machine-readable line for scripts and tests (ports may be ephemeral).
  std::printf("LISTENING %s METRICS %d\n", (*sidecar)->address().c_str(),
              (*sidecar)->metrics_port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  RAGKV_LOG(INFO) << "received signal " << sig;
  (*sidecar)->Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ragkv: RAG KV-cache sidecar (precompute, tiered store, CacheBlend fusion)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug|info|warning|error");
  // Request-level parallelism (executor workers, precompute workers) is the
  // main axis; kernels default to 1 OpenMP/BLAS thread each so the two never
  // multiply into oversubscription (style.md: no nested pools).
  int kernel_threads = 1;
  app.add_option("--kernel-threads", kernel_threads, "OpenMP/BLAS threads per kernel call")
      ->capture_default_str();

  // serve
  SidecarOptions so;
  std::string services = "all", ram = "1G", ssd = "16G";
  CLI::App* serve = app.add_subcommand("serve", "run the sidecar (all services by default)");
  serve->add_option("--listen", so.listen, "gRPC address (default loopback)")->capture_default_str();
  serve->add_option("--data-dir", so.data_dir, "RocksDB/FAISS directory")->capture_default_str();
  serve->add_option("--ram-budget", ram, "RAM tier budget (bytes, K/M/G suffix)")->capture_default_str();
  serve->add_option("--ssd-budget", ssd, "SSD tier budget")->capture_default_str();
  serve->add_option("--redis", so.redis_url, "optional Redis tier host:port");
  serve->add_option("--kv-tiers", so.kv_tiers,
                    "KV store tiers, fastest first, from ram,ssd,redis (default: ram,ssd "
                    "+ redis with --redis; e.g. 'redis' for a sidecar that relies on the "
                    "shared tier)")
      ->delimiter(',');
  serve->add_option("--auto-r-min", so.controller_r_min,
                    "BLEND_MODE_AUTO: the loading controller's quality floor")
      ->capture_default_str();
  serve->add_option("--auto-r-max", so.controller_r_max,
                    "BLEND_MODE_AUTO: the most the controller recomputes")
      ->capture_default_str();
  serve->add_option("--sync-writes", so.sync_writes, "fsync every stored chunk")
      ->capture_default_str();
  serve->add_option("--model", so.model_path, "model checkpoint (.bin/.gguf/HF dir/synthetic:...)");
  serve->add_option("--tokenizer", so.tokenizer_path, "tokenizer (default: the model's)");
  serve->add_option("--max-seq-len", so.max_seq_len, "context length override");
  serve->add_option("--chunk-tokens", so.chunk_tokens, "retrieval chunk size")->capture_default_str();
  serve->add_option("--services", services,
                    "comma list of retrieval,kvstore,precompute,blend,engine or 'all'")
      ->capture_default_str();
  serve->add_option("--engine-upstream", so.engine_upstream,
                    "sidecar address the engine calls (default: this process)");
  serve->add_option("--kv-wire-dtype", so.engine_kv_wire_dtype,
                    "fused KV element type the engine requests: f16 (half the bytes), bf16, "
                    "f32 (exact)")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}))
      ->capture_default_str();
  serve->add_option("--tls-cert", so.tls_cert_file, "PEM certificate chain");
  serve->add_option("--tls-key", so.tls_key_file, "PEM private key");
  ragkv::services::AuthTokenFlags serve_auth;
  ragkv::services::AddAuthTokenOptions(serve, &serve_auth,
                                       "require 'authorization: Bearer <token>'");
  serve->add_option("--max-message-bytes", so.max_message_bytes)->capture_default_str();
  serve->add_option("--max-rps", so.max_rps, "global request rate limit, requests/s (0 = off)")
      ->capture_default_str();
  serve->add_option("--max-rps-per-peer", so.max_rps_per_peer,
                    "request rate limit per client IP, requests/s (0 = off)")
      ->capture_default_str();
  serve->add_option("--rps-burst", so.rps_burst,
                    "token-bucket size of the rate limits (0 = one second's worth)")
      ->capture_default_str();
  serve->add_option("--max-inflight", so.max_inflight, "concurrent requests (0 = unbounded)")
      ->capture_default_str();
  serve->add_option("--corpus-root", so.corpus_roots,
                    "directory StartJob corpus paths must lie in (repeatable; none: refused)");
  serve->add_option("--workers", so.worker_threads, "executor threads")->capture_default_str();
  serve->add_option("--max-queue", so.max_queued_tasks, "executor queue bound")->capture_default_str();
  serve->add_option("--metrics-port", so.metrics_port, "Prometheus port (0 any, -1 off)")
      ->capture_default_str();
  serve->add_option("--metrics-host", so.metrics_host)->capture_default_str();

  ragkv::services::RegisterSubcommands(&app);

  CLI11_PARSE(app, argc, argv);
  ragkv::services::ScrubTokenArgs(argc, argv);  // keep it out of later `ps` output
  if (log_level == "debug") ragkv::SetMinLogLevel(ragkv::LogLevel::kDebug);
  if (log_level == "warning") ragkv::SetMinLogLevel(ragkv::LogLevel::kWarning);
  if (log_level == "error") ragkv::SetMinLogLevel(ragkv::LogLevel::kError);

  ragkv::kernels::SetMaxThreads(std::max(1, kernel_threads));
  if (serve->parsed()) {
    absl::StatusOr<std::string> token =
        ragkv::services::ResolveAuthToken(serve_auth, "ragkv serve");
    if (!token.ok()) {
      std::fprintf(stderr, "ragkv serve: %s\n", token.status().ToString().c_str());
      return 2;
    }
    so.auth_token = *token;
    return RunServe(std::move(so), services, ram, ssd);
  }
  return ragkv::services::RunSubcommands(app);
}
