#include "cli/store_flags.h"

#include <CLI/CLI.hpp>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/byte_size.h"
#include "base/status_macros.h"
#include "cli/flags.h"

namespace ragkv::cli {
absl::StatusOr<uint64_t> BytesFlag(std::string_view flag, const std::string& v) {
  absl::StatusOr<uint64_t> bytes = ParseByteSize(v);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(flag), ": ", bytes.status().message()));
  }
  return bytes;
}

namespace {

absl::StatusOr<absl::Duration> DurationFlag(std::string_view flag, const std::string& v) {
  int64_t seconds = 0;
  absl::Duration d;
  if (absl::SimpleAtoi(v, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(v, &d)) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(flag), ": '", v,
                                                   "' is not a duration (e.g. 12h, 90s, 3600)"));
  }
  if (d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(flag), ": negative"));
  }
  return d;
}

absl::StatusOr<kvstore::RedisMode> ModeFlag(const std::string& v) {
  if (v == "auto") return kvstore::RedisMode::kAuto;
  if (v == "standalone") return kvstore::RedisMode::kStandalone;
  if (v == "cluster") return kvstore::RedisMode::kCluster;
  return absl::InvalidArgumentError("--redis-mode: '" + v + "' (known: auto, standalone, cluster)");
}

}  // namespace

void AddRetrievalOptions(CLI::App* cmd, services::RetrievalSettings* r, std::string_view scope_view) {
  const std::string scope(scope_view);
  cmd->add_option("--index-factory", r->index_factory,
                  scope + "FAISS index_factory string of the retrieval index (Flat, HNSW32, "
                          "IVF256,PQ16, ...)")
      ->capture_default_str();
  cmd->add_option("--index-metric", r->metric, scope + "vector index metric")
      ->check(CLI::IsMember({"ip", "l2"}))
      ->capture_default_str();
  cmd->add_option("--embedder", r->embedder,
                  scope + "retrieval embedder: hashed, hashed:DIM, model (the served model), "
                          "vectors:DIM[:NAME] (the caller's vectors)")
      ->capture_default_str();
  cmd->add_option("--search-mode", r->search_mode, scope + "default search of text queries")
      ->check(CLI::IsMember(services::SearchModeNames()))
      ->capture_default_str();
  cmd->add_option("--retrieval-rebuild", r->rebuild,
                  scope + "a data dir built with another embedder or index is re-embedded / "
                          "re-indexed from its catalogue instead of refused")
      ->capture_default_str();
}

void AddStoreOptions(CLI::App* cmd, StoreFlags* f, std::string_view scope_view) {
  const std::string scope(scope_view);
  cmd->add_option("--ram-budget", f->ram, scope + "RAM tier budget (bytes, K/M/G suffix)")
      ->capture_default_str();
  cmd->add_option("--ssd-budget", f->ssd, scope + "SSD tier budget")->capture_default_str();
  cmd->add_option("--kv-tiers", f->kv_tiers,
                  scope + "KV store tiers, fastest first, from ram,ssd,redis (default: ram,ssd "
                          "+ redis with --redis; e.g. 'redis' for a sidecar that relies on the "
                          "shared tier)")
      ->delimiter(',');
  cmd->add_option("--kv-codec", f->kv_codec,
                  scope + "codec of the KV records written: raw (the model's dtype), int8 (per "
                          "channel), fp8 (e4m3, per head), int4 (groups of 32; keys per channel, values "
                          "per token)")
      ->check(CLI::IsMember({"raw", "int8", "fp8", "int4"}))
      ->capture_default_str();
  cmd->add_option("--redis", f->redis,
                  scope + "Redis tier: host:port[,host:port...] (cluster seeds), optionally "
                          "redis:// or rediss:// (TLS)");
  cmd->add_option("--redis-mode", f->redis_mode, scope + "auto (detect), standalone or cluster")
      ->check(CLI::IsMember({"auto", "standalone", "cluster"}))
      ->capture_default_str();
  cmd->add_option("--redis-user", f->redis_user, scope + "Redis ACL user (AUTH user password)");
  cmd->add_option("--redis-password-file", f->redis_password_file,
                  scope + "Redis password, read from this file (mode 600; default: $RAGKV_REDIS_PASSWORD)");
  cmd->add_option("--redis-prefix", f->redis_prefix,
                  scope + "key namespace: sidecars that share chunks use the same one")
      ->capture_default_str();
  cmd->add_option("--redis-ttl", f->redis_ttl, scope + "expiry of every key written (12h, 3600; 0 = none)")
      ->capture_default_str();
  cmd->add_option("--redis-budget", f->redis_budget,
                  scope + "bytes the namespace may hold in Redis, oldest chunks deleted beyond it "
                  "(0 = Redis' maxmemory policy)")
      ->capture_default_str();
  cmd->add_option("--redis-tls", f->redis_tls, scope + "TLS to Redis (also implied by rediss://)")
      ->capture_default_str();
  cmd->add_option("--redis-tls-ca", f->redis_tls_ca, scope + "PEM CA bundle (default: the system's)");
  cmd->add_option("--redis-tls-cert", f->redis_tls_cert, scope + "PEM client certificate");
  cmd->add_option("--redis-tls-key", f->redis_tls_key, scope + "PEM client key");
  cmd->add_option("--redis-tls-server-name", f->redis_tls_server_name,
                  scope + "name the server certificate must carry (default: the host)");
}

absl::StatusOr<ResolvedStore> ResolveStoreFlags(const StoreFlags& f) {
  ResolvedStore r;
  ASSIGN_OR_RETURN(r.ram_budget_bytes, BytesFlag("--ram-budget", f.ram));
  ASSIGN_OR_RETURN(r.ssd_budget_bytes, BytesFlag("--ssd-budget", f.ssd));
  r.kv_tiers = f.kv_tiers;
  r.kv_codec = f.kv_codec;
  r.redis_url = f.redis;
  kvstore::RedisTierOptions& o = r.redis;
  ASSIGN_OR_RETURN(o.mode, ModeFlag(f.redis_mode));
  o.key_prefix = f.redis_prefix;
  ASSIGN_OR_RETURN(o.ttl, DurationFlag("--redis-ttl", f.redis_ttl));
  ASSIGN_OR_RETURN(o.budget_bytes, BytesFlag("--redis-budget", f.redis_budget));
  o.username = f.redis_user;
  if (!f.redis_password_file.empty()) {
    ASSIGN_OR_RETURN(o.password, ReadSecretFile("--redis-password-file", f.redis_password_file));
  } else if (const char* env = std::getenv("RAGKV_REDIS_PASSWORD"); env != nullptr) {
    o.password = std::string(absl::StripTrailingAsciiWhitespace(env));
  }
  o.tls.enabled = f.redis_tls;
  o.tls.ca_file = f.redis_tls_ca;
  o.tls.cert_file = f.redis_tls_cert;
  o.tls.key_file = f.redis_tls_key;
  o.tls.server_name = f.redis_tls_server_name;
  if (!f.redis.empty()) {
    if (absl::Status s = kvstore::ParseRedisAddress(f.redis, &o); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--redis: ", s.message()));
    }
  }
  return r;
}

}  // namespace ragkv::cli
