#include "services/sidecar.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "blend/quality_gate.h"
#include "kvstore/tiered_store.h"
#include "model/kv_cache_pool.h"
#include "services/backends.h"
#include "services/blend_service.h"
#include "engine/reference_engine.h"
#include "services/engine_service.h"
#include "base/executor.h"
#include "services/internal/access_log.h"
#include "services/internal/bad_request_interceptor.h"
#include "services/internal/byte_budget.h"
#include "services/internal/call_gate.h"
#include "services/internal/job_watch_hub.h"
#include "services/internal/validate.h"
#include "services/internal/path_guard.h"
#include "pipeline/pipeline.h"
#include "services/kvstore_service.h"
#include "services/precompute_job.h"
#include "services/precompute_service.h"
#include "services/retrieval_service.h"
#include "services/metrics.h"
#include "services/service_context.h"

namespace ragkv::services {

struct Sidecar::Impl {
  SidecarOptions options;
  std::unique_ptr<BoundedExecutor> executor;
  Metrics metrics;
  std::unique_ptr<internal::CallGate> gate;
  std::unique_ptr<MetricsServer> metrics_server;
  std::unique_ptr<Backends> backends;
  blend::GateDecision quality_gate;                 // the served model's (ctx points here)
  kvstore::Codec kv_codec = kvstore::Codec::kRaw;   // options.kv_codec, parsed
  std::unique_ptr<model::KVCachePool> cache_pool;  // ctx.cache_pool points here
  // The request pipeline (after backends, the gate and the pool: it points
  // at them, and its store-back writes their store).
  std::unique_ptr<pipeline::Pipeline> pipeline;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<internal::JobWatchHub> watch_hub;  // after jobs: it reads them
  // The engine: its own executor (it calls back into the sidecar) and a
  // connector client to the upstream sidecar (this process by default).
  std::unique_ptr<BoundedExecutor> engine_executor;
  std::unique_ptr<Client> engine_client;
  std::unique_ptr<engine::ReferenceEngine> engine;
  ServiceContext ctx;
  std::unique_ptr<internal::ByteBudget> put_budget;
  internal::PutChunkExpect put_expect;
  std::vector<std::unique_ptr<grpc::Service>> services;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  absl::Notification done;
};

namespace {

// RandomSecret: 32 random bytes, hex (the engine's loopback bypass of the
// rate limits; never logged, never leaves the process).
std::string RandomSecret() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 8; ++i) absl::StrAppendFormat(&out, "%08x", rd());
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// InitCachePool: the fused caches' memory kept between blends, and its
// /metrics.
void InitCachePool(Sidecar::Impl* impl) {
  if (impl->options.fused_cache_pool_bytes == 0) return;
  impl->cache_pool = std::make_unique<model::KVCachePool>(impl->options.fused_cache_pool_bytes);
  impl->ctx.cache_pool = impl->cache_pool.get();
  model::KVCachePool* pool = impl->cache_pool.get();
  impl->metrics.AddCollector([pool](std::string* out) {
    const model::KVCachePool::Stats st = pool->stats();
    absl::StrAppendFormat(out,
                          "# TYPE ragkv_fused_cache_pool_creates_total counter\n"
                          "ragkv_fused_cache_pool_creates_total{result=\"reused\"} %d\n"
                          "ragkv_fused_cache_pool_creates_total{result=\"allocated\"} %d\n"
                          "# TYPE ragkv_fused_cache_pool_idle_bytes gauge\n"
                          "ragkv_fused_cache_pool_idle_bytes %d\n",
                          st.reused, st.allocated, st.idle_bytes);
  });
}

void AddStoreCollector(Metrics* metrics, kvstore::TieredStore* store) {
  metrics->AddCollector([store](std::string* out) {
    const auto tiers = store->TierStatsAll();
    struct Field {
      const char* name;
      const char* type;
      uint64_t kvstore::TierStats::*member;
    };
    static constexpr Field kFields[] = {
        {"ragkv_tier_hits_total", "counter", &kvstore::TierStats::hits},
        {"ragkv_tier_misses_total", "counter", &kvstore::TierStats::misses},
        {"ragkv_tier_bytes_read_total", "counter", &kvstore::TierStats::bytes_read},
        {"ragkv_tier_bytes_written_total", "counter", &kvstore::TierStats::bytes_written},
        {"ragkv_tier_evictions_total", "counter", &kvstore::TierStats::evictions},
        {"ragkv_tier_errors_total", "counter", &kvstore::TierStats::errors},
        {"ragkv_tier_corrupt_records_total", "counter", &kvstore::TierStats::corrupt_records},
        {"ragkv_tier_bytes_used", "gauge", &kvstore::TierStats::bytes_used},
        {"ragkv_tier_capacity_bytes", "gauge", &kvstore::TierStats::capacity_bytes},
        {"ragkv_tier_entries", "gauge", &kvstore::TierStats::entries},
        {"ragkv_tier_puts_total", "counter", &kvstore::TierStats::puts},
        {"ragkv_tier_up", "gauge", &kvstore::TierStats::up},
        {"ragkv_tier_outages_total", "counter", &kvstore::TierStats::outages},
        {"ragkv_tier_quarantined_total", "counter", &kvstore::TierStats::quarantined},
    };
    for (const Field& f : kFields) {
      absl::StrAppendFormat(out, "# TYPE %s %s\n", f.name, f.type);
      for (const auto& t : tiers) {
        absl::StrAppendFormat(out, "%s{tier=\"%s\"} %d\n", f.name, t.name, t.*(f.member));
      }
    }
    const kvstore::StoreStats s = store->Stats();
    absl::StrAppendFormat(out, "# TYPE ragkv_store_lookups_total counter\nragkv_store_lookups_total %d\n", s.lookups);
    absl::StrAppendFormat(out, "# TYPE ragkv_store_hits_total counter\nragkv_store_hits_total %d\n", s.hits);
    absl::StrAppendFormat(out, "# TYPE ragkv_store_misses_total counter\nragkv_store_misses_total %d\n", s.misses);
    absl::StrAppendFormat(out,
                          "# TYPE ragkv_store_fingerprint_mismatches_total counter\n"
                          "ragkv_store_fingerprint_mismatches_total %d\n",
                          s.fingerprint_mismatches);
  });
}

// CheckSidecarOptions: the option checks Start runs before building anything.
absl::Status CheckSidecarOptions(const SidecarOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (options.max_message_bytes < 1024) {
    return absl::InvalidArgumentError("max_message_bytes must be >= 1024");
  }
  for (const auto& name : options.services) {
    static const std::set<std::string> kKnown = {"retrieval", "kvstore", "precompute", "blend",
                                                 "engine"};
    if (!kKnown.count(name)) return absl::InvalidArgumentError("unknown service '" + name + "'");
  }
  if (options.max_rps < 0 || options.max_rps_per_peer < 0 || options.rps_burst < 0 ||
      options.max_inflight < 0) {
    return absl::InvalidArgumentError(
        "--max-rps, --max-rps-per-peer, --rps-burst and --max-inflight must be >= 0");
  }
  if (options.metrics_auth && options.auth_token.empty()) {
    return absl::InvalidArgumentError("--metrics-auth needs an RPC bearer token (--auth-token-file)");
  }
  if (options.prefix_block_tokens < 1 || options.prefix_block_tokens > 4096 ||
      options.prefix_cache_max_tokens < 0) {
    return absl::InvalidArgumentError(
        "--prefix-block-tokens must be in [1, 4096] and --prefix-cache-max-tokens >= 0");
  }
  if (absl::Status s = kvstore::ParseCodec(options.kv_codec).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-codec: ", s.message()));
  }
  return absl::OkStatus();
}

// DefineHistograms: the latency and ratio series exported as Prometheus
// histograms (docs/services.md "Metrics"; plotted by docs/grafana).
void DefineHistograms(Metrics* m) {
  for (const char* name : {"ragkv_rpc_ms", "ragkv_stage_ms", "ragkv_engine_ttft_ms",
                           "ragkv_engine_query_prefill_ms", "ragkv_tier_read_ms"}) {
    m->DefineHistogram(name, Metrics::LatencyMsBuckets());
  }
  m->DefineHistogram("ragkv_blend_ratio", {0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1});
}

// InitCallPath: the executor and the call gate (auth, limits), shared
// through impl->ctx with the metrics.
absl::Status InitCallPath(Sidecar::Impl* impl) {
  const SidecarOptions& o = impl->options;
  ASSIGN_OR_RETURN(impl->executor,
                   BoundedExecutor::Create({o.worker_threads, o.max_queued_tasks}));
  DefineHistograms(&impl->metrics);
  internal::CallGate::Options go;
  go.auth_token = o.auth_token;
  go.internal_secret = RandomSecret();
  go.max_rps = o.max_rps;
  go.max_rps_per_peer = o.max_rps_per_peer;
  go.burst = o.rps_burst;
  go.max_inflight = o.max_inflight;
  impl->gate = std::make_unique<internal::CallGate>(go, &impl->metrics);
  impl->ctx.executor = impl->executor.get();
  impl->ctx.metrics = &impl->metrics;
  impl->ctx.gate = impl->gate.get();
  impl->put_budget = std::make_unique<internal::ByteBudget>(o.max_inflight_bytes);
  impl->ctx.put_budget = impl->put_budget.get();
  impl->ctx.max_put_chunk_bytes = o.max_put_bytes;
  return absl::OkStatus();
}

// InitQualityGate: the served model's gate from its calibration record in
// the data dir (docs/quality_gate.md), logged and exported.
void InitQualityGate(Sidecar::Impl* impl) {
  const std::string fp = impl->backends->model->fingerprint_hex();
  const absl::StatusOr<blend::GateRecord> rec =
      impl->options.data_dir.empty() ? absl::NotFoundError("no data dir")
                                     : blend::ReadGateRecord(impl->options.data_dir, fp);
  impl->quality_gate = blend::DecideGate(rec);
  impl->ctx.quality_gate = &impl->quality_gate;
  const blend::GateDecision& g = impl->quality_gate;
  if (g.blending) {
    RAGKV_LOG(INFO) << "ragkv serve: " << g.reason;
  } else {
    RAGKV_LOG(WARNING) << "ragkv serve: " << g.reason;
  }
  const char* src = g.source == blend::GateDecision::Source::kCalibrated     ? "calibrated"
                    : g.source == blend::GateDecision::Source::kUncalibrated ? "uncalibrated"
                                                                             : "unreadable";
  impl->metrics.Set("ragkv_blend_gate_blending", absl::StrCat("source=\"", src, "\""),
                    g.blending ? 1 : 0);
  impl->metrics.Set("ragkv_blend_gate_ratio", "", g.ratio);
}

// RecordBytesPerToken: stored bytes per token of a `chunk_tokens` chunk of
// `model`'s KV under `codec` (header and layer prefixes included).
double RecordBytesPerToken(const model::Model& model, kvstore::Codec codec, int chunk_tokens) {
  const model::ModelConfig& c = model.config();
  kvstore::KvChunkHeader h;
  h.dtype = c.kv_dtype;
  h.codec = codec;
  h.num_layers = static_cast<uint32_t>(c.n_layers);
  h.num_kv_heads = static_cast<uint32_t>(c.n_kv_heads);
  h.head_dim = static_cast<uint32_t>(c.head_dim);
  h.tokens.assign(static_cast<size_t>(std::max(1, chunk_tokens)), 0);
  return static_cast<double>(h.UncompressedBytes()) / static_cast<double>(h.tokens.size());
}

absl::Status InitPipeline(Sidecar::Impl* impl);  // below

// InitBackends: builds the backends the enabled services need, shares them
// through impl->ctx and exports the store's metrics.
absl::Status InitBackends(Sidecar::Impl* impl) {
  const SidecarOptions& o = impl->options;
  BackendOptions bo;
  bo.data_dir = o.data_dir;
  bo.ram_budget_bytes = o.ram_budget_bytes;
  bo.ssd_budget_bytes = o.ssd_budget_bytes;
  bo.redis_url = o.redis_url;
  bo.redis = o.redis;
  bo.kv_tiers = o.kv_tiers;
  bo.controller_r_min = o.controller_r_min;
  bo.controller_r_max = o.controller_r_max;
  bo.model_path = o.model_path;
  bo.tokenizer_path = o.tokenizer_path;
  bo.max_seq_len = o.max_seq_len;
  bo.chunk_tokens = o.chunk_tokens;
  bo.retrieval = o.retrieval;
  bo.sync_writes = o.sync_writes;
  bo.wrap_tier = o.wrap_tier;
  bo.want_store = o.services.count("kvstore") || o.services.count("precompute") ||
                  o.services.count("blend");
  bo.want_retrieval = o.services.count("retrieval") || o.services.count("precompute") ||
                      o.services.count("blend");
  ASSIGN_OR_RETURN(impl->backends, BuildBackends(bo));
  Backends& b = *impl->backends;
  impl->ctx.store = b.store.get();
  impl->ctx.model = b.model.get();
  impl->ctx.tokenizer = b.tokenizer.get();
  impl->ctx.blender = b.blender.get();
  impl->ctx.controller = b.controller.get();
  impl->ctx.retriever = b.retriever.get();
  impl->ctx.search_mode = b.search_mode;
  if (b.model) {
    const model::ModelConfig& c = b.model->config();
    impl->put_expect.fingerprint = b.model->fingerprint();
    impl->put_expect.num_layers = static_cast<uint32_t>(c.n_layers);
    impl->put_expect.num_kv_heads = static_cast<uint32_t>(c.n_kv_heads);
    impl->put_expect.head_dim = static_cast<uint32_t>(c.head_dim);
    impl->ctx.put_expect = &impl->put_expect;
    impl->metrics.Set("ragkv_kv_record_bytes_per_token",
                      absl::StrCat("codec=\"", kvstore::CodecName(impl->kv_codec), "\""),
                      RecordBytesPerToken(*b.model, impl->kv_codec, o.chunk_tokens));
  }
  if (b.store) AddStoreCollector(&impl->metrics, b.store.get());
  if (b.model && b.blender) {
    InitQualityGate(impl);
    InitCachePool(impl);
    RETURN_IF_ERROR(InitPipeline(impl));
  }
  return absl::OkStatus();
}

// InitPipeline: the request pipeline over the backends, the quality gate
// and the cache pool; store-back (and with it the exact-prefix cache) when
// the server has a store and --store-back.
absl::Status InitPipeline(Sidecar::Impl* impl) {
  const SidecarOptions& o = impl->options;
  const Backends& b = *impl->backends;
  pipeline::Pipeline::Options po;
  po.model = b.model.get();
  po.tokenizer = impl->ctx.tokenizer;
  po.blender = b.blender.get();
  po.controller = b.controller.get();
  po.store = b.store.get();
  po.retriever = b.retriever.get();
  po.search_mode = b.search_mode;
  po.quality_gate = impl->ctx.quality_gate;
  po.cache_pool = impl->cache_pool.get();
  po.metrics = &impl->metrics;
  po.store_back = o.store_back;
  po.store_back_options.codec = impl->kv_codec;
  po.prefix_cache.enabled = o.prefix_cache;
  po.prefix_cache.block_tokens = o.prefix_block_tokens;
  po.prefix_cache.max_tokens = o.prefix_cache_max_tokens;
  po.neighbour_records = o.neighbour_records;
  po.first_position_records = o.first_position_records;
  ASSIGN_OR_RETURN(impl->pipeline, pipeline::Pipeline::Create(std::move(po)));
  impl->ctx.pipeline = impl->pipeline.get();
  return absl::OkStatus();
}

// InitJobs: the precompute JobManager (confined to corpus_roots) when the
// precompute service is enabled.
void InitJobs(Sidecar::Impl* impl, const std::vector<std::filesystem::path>& corpus_roots) {
  const SidecarOptions& o = impl->options;
  const Backends& b = *impl->backends;
  if (o.services.count("precompute")) {
    JobManager::Options jo;
    jo.model = b.model.get();
    jo.tokenizer = b.tokenizer.get();
    jo.retriever = b.retriever.get();
    jo.store = b.store.get();
    jo.kv_codec = impl->kv_codec;
    jo.chunk_delay = o.precompute_chunk_delay;
    jo.confine_corpus = true;
    jo.corpus_roots = corpus_roots;
    impl->jobs = std::make_unique<JobManager>(jo);
    impl->ctx.jobs = impl->jobs.get();
    impl->watch_hub = std::make_unique<internal::JobWatchHub>(impl->jobs.get(), o.max_watches);
  }
}

// AddServices: the enabled gRPC services into impl->services (the engine
// service gets its engine later, from StartEngine).
absl::Status AddServices(Sidecar::Impl* impl) {
  const SidecarOptions& o = impl->options;
  if (o.services.count("retrieval")) {
    impl->services.push_back(std::make_unique<RetrievalServiceImpl>(&impl->ctx));
  }
  if (o.services.count("kvstore")) {
    impl->services.push_back(std::make_unique<KVStoreServiceImpl>(&impl->ctx));
  }
  if (o.services.count("precompute")) {
    impl->services.push_back(
        std::make_unique<PrecomputeServiceImpl>(&impl->ctx, impl->watch_hub.get()));
  }
  if (o.services.count("blend")) {
    impl->services.push_back(std::make_unique<BlendServiceImpl>(&impl->ctx));
  }
  if (o.services.count("engine")) {
    ASSIGN_OR_RETURN(impl->engine_executor,
                     BoundedExecutor::Create({o.worker_threads, o.max_queued_tasks}));
    impl->services.push_back(std::make_unique<EngineServiceImpl>(
        nullptr, impl->engine_executor.get(), &impl->metrics, impl->gate.get()));
  }
  return absl::OkStatus();
}

// MakeServerCredentials: TLS from the cert/key PEM files, else plaintext.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SidecarOptions& o) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!o.tls_cert_file.empty()) {
    struct stat st;
    if (::stat(o.tls_key_file.c_str(), &st) == 0 && (st.st_mode & (S_IROTH | S_IWOTH))) {
      return absl::InvalidArgumentError("--tls-key " + o.tls_key_file +
                                        ": readable or writable by other users (chmod 600 it)");
    }
    ASSIGN_OR_RETURN(std::string cert, ReadFile(o.tls_cert_file));
    ASSIGN_OR_RETURN(std::string key, ReadFile(o.tls_key_file));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  return creds;
}

// PlaintextCanListen: whether a plaintext server can bind `listen` now (so
// that a TLS failure is told apart from a taken port).
bool PlaintextCanListen(const std::string& listen) {
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<grpc::Server> s = b.BuildAndStart();
  if (!s) return false;
  s->Shutdown();
  return port != 0;
}

// StartServer: builds and starts the gRPC server (health, reflection, the
// services) on o.listen and sets impl->port; Unavailable when it cannot.
absl::Status StartServer(Sidecar::Impl* impl) {
  const SidecarOptions& o = impl->options;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, MakeServerCredentials(o));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, creds, &impl->port);
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  builder.SetMaxSendMessageSize(o.max_message_bytes);
  for (auto& svc : impl->services) builder.RegisterService(svc.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(internal::NewBadRequestInterceptorFactory());
  // After the bad-request rewrite, so the request id lands on the final status.
  interceptors.push_back(internal::NewAccessLogFactory(&impl->metrics, o.access_log));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    if (!o.tls_cert_file.empty() && PlaintextCanListen(o.listen)) {
      return absl::InvalidArgumentError(
          "--tls-cert " + o.tls_cert_file + " / --tls-key " + o.tls_key_file +
          ": gRPC cannot use this certificate and key (the key does not match the "
          "certificate, or a file is not PEM); " + o.listen + " itself is free");
    }
    return absl::UnavailableError("cannot listen on " + o.listen +
                                  " (address in use or not an address of this host)");
  }
  return absl::OkStatus();
}

// StartEngine: with the engine service and a model, connects the engine to
// its upstream sidecar (this one by default) and hands it to the service.
absl::Status StartEngine(Sidecar::Impl* impl) {
  const SidecarOptions& o = impl->options;
  const Backends& b = *impl->backends;
  if (o.services.count("engine") && b.model) {
    // Now that the port is known, connect the engine to its sidecar.
    ClientOptions co;
    co.target = o.engine_upstream.empty() ? absl::StrFormat("127.0.0.1:%d", impl->port)
                                          : o.engine_upstream;
    co.auth_token = o.auth_token;
    if (o.engine_upstream.empty()) {
      // Calls to itself skip the rate/in-flight limits: the Generate that
      // issues them has already been admitted.
      co.metadata.emplace_back(internal::kInternalMetadataKey,
                               impl->gate->options().internal_secret);
    }
    co.max_message_bytes = o.max_message_bytes;
    if (!o.tls_cert_file.empty() && o.engine_upstream.empty()) {
      co.use_tls = true;
      ASSIGN_OR_RETURN(co.tls_root_certs_pem, ReadFile(o.tls_cert_file));
      co.tls_server_name = "localhost";
    }
    ASSIGN_OR_RETURN(impl->engine_client, Client::Create(co));
    engine::ReferenceEngine::Options eo{b.model.get(), b.tokenizer.get(), impl->engine_client.get()};
    if (o.engine_kv_wire_dtype == "f32") {
      eo.kv_wire_dtype = v1::DTYPE_F32;
    } else if (o.engine_kv_wire_dtype == "bf16") {
      eo.kv_wire_dtype = v1::DTYPE_BF16;
    } else if (o.engine_kv_wire_dtype == "f16") {
      eo.kv_wire_dtype = v1::DTYPE_F16;
    } else {
      return absl::InvalidArgumentError("--kv-wire-dtype must be f16, bf16 or f32, not '" +
                                        o.engine_kv_wire_dtype + "'");
    }
    ASSIGN_OR_RETURN(impl->engine, engine::ReferenceEngine::Create(eo));
    for (auto& svc : impl->services) {
      if (auto* e = dynamic_cast<EngineServiceImpl*>(svc.get())) e->set_engine(impl->engine.get());
    }
  }
  return absl::OkStatus();
}

// StartMetrics: the Prometheus endpoint unless metrics_port is -1.
absl::Status StartMetrics(Sidecar::Impl* impl) {
  const SidecarOptions& o = impl->options;
  if (o.metrics_port >= 0) {
    MetricsServer::Options mo;
    mo.host = o.metrics_host;
    mo.port = o.metrics_port;
    if (o.metrics_auth) mo.auth_token = o.auth_token;
    ASSIGN_OR_RETURN(impl->metrics_server, MetricsServer::Create(mo, &impl->metrics));
  }
  return absl::OkStatus();
}

// IsLoopbackListen: whether `listen` (host:port) binds a loopback address
// only ("localhost", 127.x, [::1]).
bool IsLoopbackListen(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// LogServing: the startup line (port, TLS, auth, limits, roots, metrics).
void LogServing(const Sidecar::Impl& impl) {
  const SidecarOptions& o = impl.options;
  if (!IsLoopbackListen(o.listen)) {
    RAGKV_LOG(WARNING) << "ragkv serve: listening on " << o.listen
                       << ", which is reachable from other hosts"
                       << (o.auth_token.empty() ? " and has no --auth-token: anyone who can reach "
                                                  "it can read and write the cache"
                                                : "")
                       << (o.tls_cert_file.empty() ? "; traffic is plaintext" : "");
  }
  RAGKV_LOG(INFO) << "ragkv serve: gRPC on port " << impl.port
                  << (o.tls_cert_file.empty() ? " (plaintext)" : " (TLS)")
                  << (o.auth_token.empty() ? "" : ", bearer auth on")
                  << (o.max_rps > 0 ? absl::StrFormat(", max %g rps", o.max_rps) : "")
                  << (o.max_rps_per_peer > 0
                          ? absl::StrFormat(", max %g rps per peer", o.max_rps_per_peer)
                          : "")
                  << (o.max_inflight > 0 ? absl::StrFormat(", max %d in flight", o.max_inflight)
                                         : "")
                  << ", corpus roots "
                  << (o.corpus_roots.empty() ? std::string("none (StartJob paths refused)")
                                             : absl::StrJoin(o.corpus_roots, ":"))
                  << ", metrics "
                  << (impl.metrics_server ? absl::StrFormat("http://%s:%d/metrics",
                                                            o.metrics_host,
                                                            impl.metrics_server->port())
                                          : std::string("off"));
}

}  // namespace

Sidecar::Sidecar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Sidecar::~Sidecar() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Start(SidecarOptions options) {
  RETURN_IF_ERROR(CheckSidecarOptions(options));
  ASSIGN_OR_RETURN(std::vector<std::filesystem::path> corpus_roots,
                   internal::CanonicalRoots(options.corpus_roots));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->kv_codec = *kvstore::ParseCodec(impl->options.kv_codec);
  RETURN_IF_ERROR(InitCallPath(impl.get()));
  RETURN_IF_ERROR(InitBackends(impl.get()));
  InitJobs(impl.get(), corpus_roots);
  RETURN_IF_ERROR(AddServices(impl.get()));
  RETURN_IF_ERROR(StartServer(impl.get()));
  RETURN_IF_ERROR(StartEngine(impl.get()));
  RETURN_IF_ERROR(StartMetrics(impl.get()));
  LogServing(*impl);
  return std::unique_ptr<Sidecar>(new Sidecar(std::move(impl)));
}

int Sidecar::port() const { return impl_->port; }

std::string Sidecar::MetricsText() const { return impl_->metrics.Render(); }

const model::Model* Sidecar::model() const {
  return impl_->backends != nullptr ? impl_->backends->model.get() : nullptr;
}

void Sidecar::DrainStoreBack() const {
  if (impl_->pipeline != nullptr) impl_->pipeline->DrainStoreBack();
}

int Sidecar::metrics_port() const {
  return impl_->metrics_server ? impl_->metrics_server->port() : -1;
}

std::string Sidecar::listen_address() const {
  return absl::StrFormat("%s:%d", impl_->options.listen.substr(0, impl_->options.listen.rfind(':')),
                         impl_->port);
}

std::string Sidecar::address() const {
  std::string host = impl_->options.listen.substr(0, impl_->options.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrFormat("%s:%d", host, impl_->port);
}

void Sidecar::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  RAGKV_LOG(INFO) << "ragkv serve: shutting down (grace " << absl::FormatDuration(grace) << ")";
  if (impl_->jobs) impl_->jobs->CancelAll();  // stored chunks stay stored
  if (impl_->watch_hub) impl_->watch_hub->Stop();  // ends every watch now, not after the grace
  if (impl_->server) {
    // Drain: probes see NOT_SERVING, new outside calls get UNAVAILABLE, the
    // calls in flight (and the engine's own calls on their behalf) finish;
    // whatever is still running when the grace ends is cancelled.
    impl_->server->GetHealthCheckService()->SetServingStatus(false);
    impl_->gate->StartDrain();
    const absl::Time t0 = absl::Now();
    const bool idle = impl_->gate->WaitIdle(absl::ToChronoMilliseconds(grace));
    RAGKV_LOG(INFO) << "ragkv serve: " << (idle ? "drained in " : "grace over after ")
                    << absl::FormatDuration(absl::Now() - t0)
                    << (idle ? "" : absl::StrFormat("; cancelling %d calls", impl_->gate->inflight()));
    impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
  }
  if (impl_->engine_executor) impl_->engine_executor->Shutdown();
  impl_->executor->Shutdown();
  // After the blends that schedule store-back, before the store closes.
  if (impl_->pipeline) impl_->pipeline->StopStoreBack();
  if (impl_->metrics_server) impl_->metrics_server->Stop();
  if (impl_->server) impl_->server->Wait();
  impl_->watch_hub.reset();  // after Wait: no WatchJob can reach it any more
  impl_->jobs.reset();
  impl_->ctx.pipeline = nullptr;
  impl_->pipeline.reset();
  impl_->backends.reset();  // saves the retrieval index, flushes the store
  impl_->done.Notify();
}

void Sidecar::Wait() { impl_->done.WaitForNotification(); }

}  // namespace ragkv::services
