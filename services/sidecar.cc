#include "services/sidecar.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kvstore/ram_tier.h"
#include "kvstore/ssd_tier.h"
#include "kvstore/tiered_store.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "services/executor.h"
#include "services/kvstore_service.h"
#include "services/metrics.h"
#include "services/service_context.h"

namespace ragkv::services {

struct Sidecar::Impl {
  SidecarOptions options;
  std::unique_ptr<BoundedExecutor> executor;
  Metrics metrics;
  std::unique_ptr<MetricsServer> metrics_server;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::unique_ptr<kvstore::TieredStore> store;
  ServiceContext ctx;
  std::vector<std::unique_ptr<grpc::Service>> services;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  absl::Notification done;
};

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

absl::Status BuildBackends(Sidecar::Impl* s) {
  const SidecarOptions& o = s->options;
  // Model (optional).
  if (!o.model_path.empty()) {
    model::LoadOptions lo;
    lo.max_seq_len = o.max_seq_len;
    ASSIGN_OR_RETURN(s->model, model::LoadModel(o.model_path, lo));
    std::string tok_path = o.tokenizer_path;
    if (tok_path.empty()) {
      ASSIGN_OR_RETURN(tok_path, model::DefaultTokenizerPath(o.model_path));
    }
    ASSIGN_OR_RETURN(s->tokenizer, model::LoadTokenizer(tok_path));
    RAGKV_LOG(INFO) << "model " << o.model_path << " fingerprint " << s->model->fingerprint_hex();
  }
  // Store: RAM > SSD (> Redis).
  const bool need_store = o.services.count("kvstore") || o.services.count("precompute") ||
                          o.services.count("blend");
  if (need_store) {
    std::error_code ec;
    std::filesystem::create_directories(o.data_dir + "/kv", ec);
    if (ec) return absl::InternalError("cannot create " + o.data_dir + "/kv: " + ec.message());
    std::vector<std::shared_ptr<kvstore::Tier>> tiers;
    kvstore::RamTierOptions ram;
    ram.capacity_bytes = o.ram_budget_bytes;
    ASSIGN_OR_RETURN(auto ram_tier, kvstore::CreateRamTier(ram));
    tiers.push_back(std::move(ram_tier));
    kvstore::SsdTierOptions ssd;
    ssd.path = o.data_dir + "/kv";
    ssd.capacity_bytes = o.ssd_budget_bytes;
    ASSIGN_OR_RETURN(auto ssd_tier, kvstore::CreateSsdTier(ssd));
    tiers.push_back(std::move(ssd_tier));
    if (!o.redis_url.empty()) {
      return absl::UnimplementedError("--redis: the Redis tier is not wired into serve yet");
    }
    ASSIGN_OR_RETURN(s->store, kvstore::TieredStore::Create({}, std::move(tiers)));
    AddStoreCollector(&s->metrics, s->store.get());
  }
  s->ctx.store = s->store.get();
  s->ctx.model = s->model.get();
  s->ctx.tokenizer = s->tokenizer.get();
  return absl::OkStatus();
}

}  // namespace

Sidecar::Sidecar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Sidecar::~Sidecar() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Start(SidecarOptions options) {
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
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const SidecarOptions& o = impl->options;
  ASSIGN_OR_RETURN(impl->executor,
                   BoundedExecutor::Create({o.worker_threads, o.max_queued_tasks}));
  impl->ctx.executor = impl->executor.get();
  impl->ctx.metrics = &impl->metrics;
  impl->ctx.auth_token = o.auth_token;
  RETURN_IF_ERROR(BuildBackends(impl.get()));

  if (o.services.count("kvstore")) {
    impl->services.push_back(std::make_unique<KVStoreServiceImpl>(&impl->ctx));
  }

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!o.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(std::string cert, ReadFile(o.tls_cert_file));
    ASSIGN_OR_RETURN(std::string key, ReadFile(o.tls_key_file));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, creds, &impl->port);
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  builder.SetMaxSendMessageSize(o.max_message_bytes);
  for (auto& svc : impl->services) builder.RegisterService(svc.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return absl::UnavailableError("cannot listen on " + o.listen);
  }
  if (o.metrics_port >= 0) {
    ASSIGN_OR_RETURN(impl->metrics_server,
                     MetricsServer::Create({o.metrics_host, o.metrics_port}, &impl->metrics));
  }
  RAGKV_LOG(INFO) << "ragkv serve: gRPC on port " << impl->port
                  << (o.tls_cert_file.empty() ? " (plaintext)" : " (TLS)")
                  << (o.auth_token.empty() ? "" : ", bearer auth on") << ", metrics "
                  << (impl->metrics_server ? absl::StrFormat("http://%s:%d/metrics",
                                                             o.metrics_host,
                                                             impl->metrics_server->port())
                                           : std::string("off"));
  return std::unique_ptr<Sidecar>(new Sidecar(std::move(impl)));
}

int Sidecar::port() const { return impl_->port; }

int Sidecar::metrics_port() const {
  return impl_->metrics_server ? impl_->metrics_server->port() : -1;
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
  if (impl_->server) {
    impl_->server->GetHealthCheckService()->SetServingStatus(false);
    impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  }
  impl_->executor->Shutdown();
  if (impl_->metrics_server) impl_->metrics_server->Stop();
  if (impl_->store) {
    absl::Status s = impl_->store->Flush();
    if (!s.ok()) {
      RAGKV_LOG(ERROR) << "store flush failed: " << s;
    }
  }
  if (impl_->server) impl_->server->Wait();
  impl_->done.Notify();
}

void Sidecar::Wait() { impl_->done.WaitForNotification(); }

}  // namespace ragkv::services
