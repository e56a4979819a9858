// serve.cc: `ragkv serve`, the sidecar (services/sidecar.h) on loopback by
// default; SIGTERM/SIGINT shut it down.
#include <CLI/CLI.hpp>
#include <signal.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "absl/strings/str_split.h"
#include "base/log.h"
#include "cli/command.h"
#include "cli/config_file.h"
#include "cli/flags.h"
#include "cli/store_flags.h"
#include "services/sidecar.h"

namespace ragkv::cli {
namespace {

class ServeCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--config", config_,
                    "TOML file of these flags, keys without the dashes (flags given here win)");
    cmd->add_flag("--print-config", print_config_, "print the effective configuration and exit");
    app_ = cmd;
    cmd->add_option("--listen", so_.listen, "gRPC address (default loopback)")->capture_default_str();
    cmd->add_option("--data-dir", so_.data_dir, "RocksDB/FAISS directory")->capture_default_str();
    AddStoreOptions(cmd, &store_);
    AddRetrievalOptions(cmd, &so_.retrieval);
    cmd->add_option("--auto-r-min", so_.controller_r_min,
                      "BLEND_MODE_AUTO: the loading controller's quality floor")
        ->capture_default_str();
    cmd->add_option("--auto-r-max", so_.controller_r_max,
                      "BLEND_MODE_AUTO: the most the controller recomputes")
        ->capture_default_str();
    cmd->add_option("--sync-writes", so_.sync_writes, "fsync every stored chunk")
        ->capture_default_str();
    cmd->add_option("--store-back", so_.store_back,
                    "store the KV of chunks a blend computed fresh, after the response")
        ->capture_default_str();
    cmd->add_option("--prefix-cache", so_.prefix_cache,
                    "serve the longest stored exact prefix of a prompt as exact rows, and store "
                    "the exact rows of every blend as prefix blocks (needs --store-back)")
        ->capture_default_str();
    cmd->add_option("--prefix-block-tokens", so_.prefix_block_tokens, "prefix block size")
        ->capture_default_str();
    cmd->add_option("--prefix-cache-max-tokens", so_.prefix_cache_max_tokens,
                    "longest prefix looked up or stored per prompt")
        ->capture_default_str();
    cmd->add_option("--fused-cache-pool", pool_,
                    "memory of finished fused caches kept for the next blend (bytes, K/M/G "
                    "suffix; 0: none)")
        ->capture_default_str();
    cmd->add_option("--access-log", so_.access_log,
                    "one log line per RPC: method, peer, status, ms, bytes, request id")
        ->capture_default_str();
    cmd->add_option("--metrics-auth", so_.metrics_auth,
                    "/metrics requires the RPCs' bearer token (--auth-token-file)")
        ->capture_default_str();
    cmd->add_option("--model", so_.model_path, "model checkpoint (.bin/.gguf/HF dir/synthetic:...)");
    cmd->add_option("--tokenizer", so_.tokenizer_path, "tokenizer (default: the model's)");
    cmd->add_option("--max-seq-len", so_.max_seq_len, "context length override");
    cmd->add_option("--chunk-tokens", so_.chunk_tokens, "retrieval chunk size")->capture_default_str();
    cmd->add_option("--services", services_,
                      "comma list of retrieval,kvstore,precompute,blend,engine or 'all'")
        ->capture_default_str();
    cmd->add_option("--engine-upstream", so_.engine_upstream,
                      "sidecar address the engine calls (default: this process)");
    cmd->add_option("--kv-wire-dtype", so_.engine_kv_wire_dtype,
                      "fused KV element type the engine requests: f16 (half the bytes), bf16, "
                      "f32 (exact)")
        ->check(CLI::IsMember({"f16", "bf16", "f32"}))
        ->capture_default_str();
    cmd->add_option("--tls-cert", so_.tls_cert_file, "PEM certificate chain");
    cmd->add_option("--tls-key", so_.tls_key_file, "PEM private key");
      AddAuthTokenOptions(cmd, &auth_,
                                         "require 'authorization: Bearer <token>'");
    cmd->add_option("--max-message-bytes", so_.max_message_bytes)->capture_default_str();
    cmd->add_option("--max-put-bytes", so_.max_put_bytes,
                    "K/V bytes one PutChunk stream may declare")
        ->capture_default_str();
    cmd->add_option("--max-inflight-bytes", so_.max_inflight_bytes,
                    "K/V bytes all PutChunk streams in flight may hold (0 = unbounded)")
        ->capture_default_str();
    cmd->add_option("--max-rps", so_.max_rps, "global request rate limit, requests/s (0 = off)")
        ->capture_default_str();
    cmd->add_option("--max-rps-per-peer", so_.max_rps_per_peer,
                      "request rate limit per client IP, requests/s (0 = off)")
        ->capture_default_str();
    cmd->add_option("--rps-burst", so_.rps_burst,
                      "token-bucket size of the rate limits (0 = one second's worth)")
        ->capture_default_str();
    cmd->add_option("--max-inflight", so_.max_inflight, "concurrent requests (0 = unbounded)")
        ->capture_default_str();
    cmd->add_option("--corpus-root", so_.corpus_roots,
                      "directory StartJob corpus paths must lie in (repeatable; none: refused)");
    cmd->add_option("--workers", so_.worker_threads, "executor threads")->capture_default_str();
    cmd->add_option("--max-queue", so_.max_queued_tasks, "executor queue bound")->capture_default_str();
    cmd->add_option("--metrics-port", so_.metrics_port, "Prometheus port (0 any, -1 off)")
        ->capture_default_str();
    cmd->add_option("--metrics-host", so_.metrics_host)->capture_default_str();
  }

  int Run() override {
    if (!config_.empty()) {
      if (absl::Status s = ApplyConfigFile(app_, config_); !s.ok()) {
        std::fprintf(stderr, "ragkv serve: --config %s\n", std::string(s.message()).c_str());
        return 2;
      }
    }
    if (print_config_) {
      std::fputs(EffectiveConfig(app_).c_str(), stdout);
      return 0;
    }
    absl::StatusOr<std::string> token = ResolveAuthToken(auth_, "ragkv serve");
    if (!token.ok()) {
      std::fprintf(stderr, "ragkv serve: %s\n", token.status().ToString().c_str());
      return 2;
    }
    so_.auth_token = *token;
    if (!services_.empty() && services_ != "all") {
      so_.services.clear();
      for (auto s : absl::StrSplit(services_, ',', absl::SkipEmpty())) {
        so_.services.insert(std::string(s));
      }
    }
    absl::StatusOr<ResolvedStore> store = ResolveStoreFlags(store_);
    if (!store.ok()) {
      std::fprintf(stderr, "ragkv serve: %s\n", std::string(store.status().message()).c_str());
      return 2;
    }
    absl::StatusOr<uint64_t> pool = BytesFlag("--fused-cache-pool", pool_);
    if (!pool.ok()) {
      std::fprintf(stderr, "ragkv serve: %s\n", std::string(pool.status().message()).c_str());
      return 2;
    }
    so_.fused_cache_pool_bytes = *pool;
    so_.ram_budget_bytes = store->ram_budget_bytes;
    so_.ssd_budget_bytes = store->ssd_budget_bytes;
    so_.kv_tiers = store->kv_tiers;
    so_.kv_codec = store->kv_codec;
    so_.redis_url = store->redis_url;
    so_.redis = store->redis;
    return Serve();
  }

 private:
  int Serve();

  services::SidecarOptions so_;
  StoreFlags store_;
  std::string services_ = "all", config_;
  std::string pool_ = "1G";  // --fused-cache-pool
  bool print_config_ = false;
  CLI::App* app_ = nullptr;
  AuthTokenFlags auth_;
};

int ServeCommand::Serve() {
  // SIGTERM/SIGINT are taken synchronously by this thread (sigwait); block
  // them before any other thread exists so no worker receives them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto sidecar = services::Sidecar::Start(std::move(so_));
  if (!sidecar.ok()) {
    std::fprintf(stderr, "ragkv serve: %s\n", sidecar.status().ToString().c_str());
    return 1;
  }
  // Machine-readable line for scripts and tests (ports may be ephemeral).
  std::printf("LISTENING %s METRICS %d\n", (*sidecar)->listen_address().c_str(),
              (*sidecar)->metrics_port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  RAGKV_LOG(INFO) << "received signal " << sig;
  (*sidecar)->Shutdown();
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewServeCommand() { return std::make_unique<ServeCommand>(); }

}  // namespace ragkv::cli
