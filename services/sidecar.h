// sidecar.h: Sidecar, the `ragkv serve` process: builds the libraries (model,
// tiered KV store, blender, retrieval corpus), the bounded executor, metrics,
// and one gRPC server hosting the enabled services, with health checking,
// reflection, optional TLS, bearer-token auth, rate and in-flight limits and
// confinement of client-named corpus paths.
//
// Lifecycle: Start() returns a serving sidecar; Shutdown() stops accepting
// calls, lets in-flight calls finish (up to a grace period, then cancels
// them), cancels precompute jobs (stored chunks stay stored), drains the
// executor and flushes the store. The destructor calls Shutdown().
// Thread safety: Shutdown and the accessors are thread-safe.
#ifndef RAGKV_SERVICES_SIDECAR_H_
#define RAGKV_SERVICES_SIDECAR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvstore/redis/redis_tier.h"
#include "services/retrieval_settings.h"

namespace ragkv::kvstore {
class Tier;
}

namespace ragkv::model {
class Model;
}

namespace ragkv::services {

struct SidecarOptions {
  // listen: gRPC address. Default loopback only; port 0 picks a free port
  // (read it back with Sidecar::port()).
  std::string listen = "127.0.0.1:50051";
  // TLS: both PEM files or neither (plaintext).
  std::string tls_cert_file;
  std::string tls_key_file;
  // auth_token: when set, every ragkv RPC must carry
  // "authorization: Bearer <token>" (UNAUTHENTICATED otherwise). The gRPC
  // health and reflection services stay open for probes.
  std::string auth_token;
  // max_message_bytes: gRPC send/receive limit per message. Default 64 MiB.
  int max_message_bytes = 64 << 20;
  // PutChunk memory bounds: a stream whose header declares more K/V bytes
  // than max_put_bytes is refused before any layer is read (default 1 GiB),
  // and streams in flight together hold at most max_inflight_bytes
  // (default 2 GiB; 0 = unbounded). Both RESOURCE_EXHAUSTED.
  uint64_t max_put_bytes = uint64_t{1} << 30;
  uint64_t max_inflight_bytes = uint64_t{2} << 30;
  // max_watches: WatchJob streams open at once (one thread serves them all).
  int max_watches = 1024;
  // Admission limits (services/internal/call_gate.h), checked after auth on
  // every ragkv RPC; exceeding one answers RESOURCE_EXHAUSTED and counts
  // ragkv_rpc_rejected_total{reason}. The engine's own calls to this
  // process are exempt. max_rps: global token bucket, requests/s (0 = off,
  // default); max_rps_per_peer: one bucket per client IP (0 = off, default);
  // rps_burst: bucket size (0 = one second's worth, at least 1);
  // max_inflight: calls admitted and not finished (0 = off, default).
  double max_rps = 0;
  double max_rps_per_peer = 0;
  double rps_burst = 0;
  int max_inflight = 0;
  // corpus_roots: directories PrecomputeService.StartJob may read corpus
  // paths from (resolved, `..` and symlinks followed; outside =
  // PERMISSION_DENIED). Empty (default): every server-side corpus path is
  // refused with FAILED_PRECONDITION. Each must be an existing directory.
  std::vector<std::string> corpus_roots;
  // Executor: worker threads for heavy work and queue bound (load shedding).
  int worker_threads = 2;
  size_t max_queued_tasks = 1024;
  // metrics_port: Prometheus /metrics on metrics_host; 0 = any free port,
  // -1 = off.
  std::string metrics_host = "127.0.0.1";
  int metrics_port = 0;

  // data_dir: RocksDB (KV store, catalogue) and FAISS files live here.
  std::string data_dir = "./ragkv-data";
  // ram_budget_bytes: RAM tier byte budget. Default 1 GiB.
  uint64_t ram_budget_bytes = uint64_t{1} << 30;
  // ssd_budget_bytes: SSD tier byte budget. Default 16 GiB.
  uint64_t ssd_budget_bytes = uint64_t{16} << 30;
  // sync_writes: fsync every SSD-tier Put / catalogue mutation.
  bool sync_writes = true;
  // Store back the KV of chunks a blend had to compute fresh (their record
  // missed), after the response (services/internal/store_back.h).
  bool store_back = true;
  // Exact-prefix cache inside blends (services/internal/prefix_cache.h):
  // the longest stored chain of prefix blocks is served as exact rows, and
  // the exact rows of every blend are stored as blocks of
  // prefix_block_tokens, up to prefix_cache_max_tokens per prompt.
  bool prefix_cache = true;
  int prefix_block_tokens = 16;
  int64_t prefix_cache_max_tokens = 4096;
  // Neighbour-aware records (pipeline::Pipeline::Options::neighbour_records):
  // k > 0 serves a catalogue chunk's record computed after its k nearest
  // chunks when stored (`ragkv precompute --neighbours k`). Default 0: off.
  int neighbour_records = 0;
  // First-position records (pipeline::Pipeline::Options::
  // first_position_records): the prompt's first chunk is served from its
  // KV computed right after the prompt's exact prefix when stored, and
  // store-back writes that record when it is not. Default off.
  bool first_position_records = false;
  // fused_cache_pool_bytes: memory of finished fused caches kept for the
  // next blend (model/kv_cache_pool.h): a fresh 100 MB cache costs ~240 ms
  // of page faults on a VM. 0 = every blend allocates. Default 1 GiB.
  uint64_t fused_cache_pool_bytes = uint64_t{1} << 30;
  // access_log: one structured line per RPC (method, peer, status, ms,
  // bytes, request id); the request id and ragkv_rpc_ms are always on.
  bool access_log = true;
  // metrics_auth: /metrics asks for the RPCs' bearer token too (auth_token).
  bool metrics_auth = false;
  // kv_codec: codec of the records this server writes (precompute jobs,
  // store-back): "raw" (the model's KV dtype), "int8" (per channel) or
  // "fp8" (e4m3, per head) or "int4" (groups of 32); docs/kv_format.md.
  // Reads accept every codec.
  std::string kv_codec = "raw";
  // redis_url: optional shared Redis tier: host:port[,host:port...]
  // (cluster seeds), optionally redis:// or rediss:// (TLS).
  std::string redis_url;
  // redis: every other Redis tier setting (user, password, key prefix, TTL,
  // budget, mode, TLS); its endpoints come from redis_url.
  kvstore::RedisTierOptions redis;
  // kv_tiers: the store's tiers, fastest first, from ram, ssd, redis; empty
  // = ram, ssd (+ redis with redis_url). See BackendOptions::kv_tiers.
  std::vector<std::string> kv_tiers;
  // BLEND_MODE_AUTO: the loading controller's quality floor and ceiling.
  double controller_r_min = 0.15;
  double controller_r_max = 0.5;

  // model_path: checkpoint (llama2.c .bin, .gguf, HF dir, "synthetic:...").
  // Empty: no model (precompute/blend/engine answer FAILED_PRECONDITION).
  std::string model_path;
  // tokenizer_path: empty = the model's own (model/loader.h).
  std::string tokenizer_path;
  // max_seq_len: context override for the model (0 = from the file).
  int max_seq_len = 0;
  // chunk_tokens: target chunk size of the retrieval chunker.
  int chunk_tokens = 128;
  // retrieval: index factory, embedder, search mode, rebuild-or-refuse
  // (services/backends.h).
  RetrievalSettings retrieval;

  // services: which to host: retrieval, kvstore, precompute, blend, engine.
  std::set<std::string> services = {"retrieval", "kvstore", "precompute", "blend", "engine"};
  // wrap_tier: testing seam (BackendOptions::wrap_tier).
  std::function<std::shared_ptr<kvstore::Tier>(std::shared_ptr<kvstore::Tier>)> wrap_tier;
  // precompute_chunk_delay: testing seam (JobManager::Options::chunk_delay).
  absl::Duration precompute_chunk_delay = absl::ZeroDuration();
  // engine_upstream: the sidecar the engine calls through the connector;
  // empty = this process itself.
  std::string engine_upstream;
  // engine_kv_wire_dtype: the fused KV element type the engine requests from
  // the Blend RPC: "f16" (default, half the bytes), "bf16" or "f32" (exact).
  std::string engine_kv_wire_dtype = "f16";
};

class Sidecar {
 public:
  // Start: builds everything and starts serving. Errors: InvalidArgument
  // (bad options, a --corpus-root that is not a directory), NotFound (model path), Unavailable (address in use),
  // Internal (store cannot open).
  static absl::StatusOr<std::unique_ptr<Sidecar>> Start(SidecarOptions options);
  ~Sidecar();

  // listen_address: the address bound, as configured (0.0.0.0:port when all
  // interfaces); address(): where a local client connects (127.0.0.1:port then).
  std::string listen_address() const;
  int port() const;          // the bound gRPC port
  int metrics_port() const;  // -1 when off
  // MetricsText: what GET /metrics on the metrics port answers (Prometheus
  // text 0.0.4): an engine front end in this process appends it to its own.
  std::string MetricsText() const;
  std::string address() const;  // "127.0.0.1:<port>" style, for clients
  // model: the served model (null without --model); valid while the Sidecar
  // lives. An engine front end in this process reads its fingerprint and
  // config here rather than loading the file a second time.
  const model::Model* model() const;
  // DrainStoreBack: waits until the store-back work queued so far is done
  // (benchmarks and tests; a no-op without a blend service or store-back).
  void DrainStoreBack() const;

  // Shutdown: see the file comment. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(10));
  // Wait: blocks until Shutdown has completed.
  void Wait();

  struct Impl;

 private:
  explicit Sidecar(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_SIDECAR_H_
