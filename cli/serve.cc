// serve.cc: `ragkv serve`, the sidecar (services/sidecar.h) on loopback by
// default; SIGTERM/SIGINT shut it down. With --engine llama.cpp the HTTP
// server and llama.cpp run in the same process (cli/serve.h): ragkv execs
// ragkv-llama, whose `serve` is this command with a front end.
#include <CLI/CLI.hpp>
#include <signal.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/log.h"
#include "cli/command.h"
#include "cli/config_file.h"
#include "cli/flags.h"
#include "cli/serve.h"
#include "cli/store_flags.h"
#include "services/sidecar.h"

namespace ragkv::cli {
namespace {

class ServeCommand : public Command {
 public:
  explicit ServeCommand(EngineFrontEndFactory front_end) : front_end_(front_end) {}
  void Register(CLI::App* cmd) override {
    AddEngineOptions(cmd);
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
    cmd->add_option("--neighbour-records", so_.neighbour_records,
                    "k > 0: serve catalogue chunks from their neighbour-aware records (written by "
                    "`ragkv precompute --neighbours k`), the plain record when absent")
        ->check(CLI::Range(0, 16))
        ->capture_default_str();
    cmd->add_option("--first-position-records", so_.first_position_records,
                    "serve the prompt's first chunk from its KV computed right after the "
                    "prompt's exact prefix (exact rows) when stored; store-back writes it when "
                    "not (needs --store-back)")
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
    if (!engine_.engine.empty() && engine_.engine != "llama.cpp") {
      std::fprintf(stderr, "ragkv serve: --engine %s: the engines are llama.cpp\n",
                   engine_.engine.c_str());
      return 2;
    }
    if (!engine_.engine.empty() && front_end_ == nullptr) return ExecLlama();
    return Serve();
  }

 private:
  void AddEngineOptions(CLI::App* cmd);
  int ExecLlama();
  int Serve();

  services::SidecarOptions so_;
  StoreFlags store_;
  std::string services_ = "all", config_;
  std::string pool_ = "1G";  // --fused-cache-pool
  bool print_config_ = false;
  CLI::App* app_ = nullptr;
  AuthTokenFlags auth_;
  EngineServeFlags engine_;
  EngineFrontEndFactory front_end_ = nullptr;
  std::unique_ptr<EngineFrontEnd> fe_;
};

void ServeCommand::AddEngineOptions(CLI::App* cmd) {
  cmd->add_option("--engine", engine_.engine,
                  "run an engine in this process: llama.cpp (the OpenAI-compatible HTTP server "
                  "on --http; needs scripts/setup-llamacpp)");
  cmd->add_option("--http", engine_.http, "--engine: HTTP API address HOST:PORT (port 0: any)")
      ->capture_default_str();
  cmd->add_option("--parallel", engine_.parallel, "--engine: slots (parallel sequences)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--ctx-size", engine_.ctx_size,
                  "--engine: total context cells, split across the --parallel slots")
      ->check(CLI::Range(16, 1 << 22))
      ->capture_default_str();
  cmd->add_option("--threads", engine_.threads, "--engine: llama.cpp threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-queue-requests", engine_.max_queue,
                  "--engine: requests waiting for a slot; more are answered 429")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--alias", engine_.alias, "--engine: the served model id (default: the file's name)");
  cmd->add_option("--chat-template", engine_.chat_template,
                  "--engine: a llama.cpp built-in chat template name (default: the file's own, "
                  "else chatml)");
  cmd->add_option("--learn-from-traffic", engine_.learn,
                  "--engine: store the KV of pasted passages the store has not seen, so the "
                  "next request that pastes them reuses it (docs/engines.md)")
      ->capture_default_str();
  cmd->add_option("--batch-size", engine_.batch_size,
                  "--engine: tokens per llama_decode: every slot's next token and new prompts' "
                  "tokens share it (llama-server's -b)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--retrieval-k", engine_.retrieval_k,
                  "--engine: server-side retrieval: the top-k catalogue chunks for a chat's "
                  "last user message go in as documents (0 = off; a request's ragkv.k wins)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--adaptive-budget", engine_.adaptive_budget,
                  "--engine: requests that set no ratio spend this mean recompute ratio, each "
                  "request's share set by its estimated error (docs/blend.md \"Adaptive ratio\", "
                  "the budget rule; 0 = the fixed default ratio)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--reorder-documents", engine_.reorder_documents,
                  "--engine: a chat's documents are an unordered set: place them so that the "
                  "longest stored exact prefix comes first (a request's ragkv.reorder wins; "
                  "docs/services.md)")
      ->capture_default_str();
  cmd->add_option("--http-keep-alive", engine_.keep_alive_s,
                  "--engine: seconds an idle kept-alive HTTP connection stays open (it holds "
                  "a worker meanwhile; llama-server's 5)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  cmd->add_option("--request-timeout", engine_.request_timeout_s,
                  "--engine: seconds a request may take from arrival to its last token; past "
                  "it, it ends with an error (0 = no deadline)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
}

// ExecLlama: `ragkv serve --engine llama.cpp` runs in ragkv-llama (the one
// binary linking llama.cpp), with every flag given here (the config file's
// included); the bearer token goes through the environment, never argv.
int ServeCommand::ExecLlama() {
  std::string bin;
  if (const char* e = std::getenv("RAGKV_LLAMA_BIN"); e != nullptr && *e) {
    bin = e;
  } else {
    std::error_code ec;
    bin = (std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "ragkv-llama")
              .string();
  }
  std::vector<std::string> args = {bin};
  AppendGlobalFlags(app_->get_parent(), &args);
  args.push_back("serve");
  for (const CLI::Option* o : app_->get_options()) {
    const std::string name = o->get_name(false, true);
    if (o->count() == 0 || name.rfind("--", 0) != 0 || name == "--help" || name == "--config" ||
        name == "--print-config" || name == "--auth-token" || name == "--auth-token-file") {
      continue;
    }
    for (const std::string& v : o->results()) {
      args.push_back(name);
      args.push_back(v);
    }
  }
  if (!so_.auth_token.empty()) ::setenv("RAGKV_AUTH_TOKEN", so_.auth_token.c_str(), 1);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(bin.c_str(), argv.data());
  std::fprintf(stderr,
               "ragkv serve: --engine llama.cpp needs %s (%s): this build has no llama.cpp "
               "engine; run scripts/setup-llamacpp and rebuild, or set RAGKV_LLAMA_BIN\n",
               bin.c_str(), std::strerror(errno));
  return 2;
}

int ServeCommand::Serve() {
  // SIGTERM/SIGINT are taken synchronously by this thread (sigwait); block
  // them before any other thread exists so no worker receives them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (!engine_.engine.empty()) {
    fe_ = front_end_();
    if (absl::Status s = fe_->Bind(engine_, &so_); !s.ok()) {
      std::fprintf(stderr, "ragkv serve: %s\n", s.ToString().c_str());
      return 1;
    }
    // The HTTP port answers 503 from here until the engine is ready.
    std::printf("HTTP %s\n", fe_->http_address().c_str());
    std::fflush(stdout);
  }
  const services::SidecarOptions options = so_;
  auto sidecar = services::Sidecar::Start(std::move(so_));
  if (!sidecar.ok()) {
    std::fprintf(stderr, "ragkv serve: %s\n", sidecar.status().ToString().c_str());
    return 1;
  }
  if (fe_ != nullptr) {
    if (absl::Status s = fe_->Ready(options, sidecar->get()); !s.ok()) {
      std::fprintf(stderr, "ragkv serve: --engine llama.cpp: %s\n", s.ToString().c_str());
      (*sidecar)->Shutdown();
      return 1;
    }
  }
  // Machine-readable line for scripts and tests (ports may be ephemeral).
  std::printf("LISTENING %s METRICS %d\n", (*sidecar)->listen_address().c_str(),
              (*sidecar)->metrics_port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  RAGKV_LOG(INFO) << "received signal " << sig;
  if (fe_ != nullptr) fe_->Drain();
  (*sidecar)->Shutdown();
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewServeCommand() { return std::make_unique<ServeCommand>(nullptr); }
std::unique_ptr<Command> NewServeCommandWith(EngineFrontEndFactory front_end) {
  return std::make_unique<ServeCommand>(front_end);
}

}  // namespace ragkv::cli
