// store_flags.h: the KV store flags shared by `ragkv serve` and local-mode
// `ragkv precompute` (tier budgets, tiers, codec, the Redis tier's address,
// credentials, namespace, TTL, budget and TLS), so that both write the same
// records the same way. Private to the ragkv binary.
#ifndef RAGKV_CLI_STORE_FLAGS_H_
#define RAGKV_CLI_STORE_FLAGS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/redis/redis_tier.h"
#include "services/retrieval_settings.h"

namespace CLI {
class App;
}

namespace ragkv::cli {

struct StoreFlags {
  std::string ram = "1G", ssd = "16G", kv_codec = "raw";
  std::vector<std::string> kv_tiers;
  // --redis: host:port[,host:port...], optionally redis:// or rediss:// (TLS).
  std::string redis;
  std::string redis_mode = "auto";
  std::string redis_user, redis_password_file;
  std::string redis_prefix = "ragkv";
  std::string redis_ttl = "0";     // a duration ("12h", "90s") or seconds; 0 = none
  std::string redis_budget = "0";  // bytes (K/M/G suffix); 0 = Redis' own policy
  bool redis_tls = false;
  std::string redis_tls_ca, redis_tls_cert, redis_tls_key, redis_tls_server_name;
};

// AddStoreOptions: registers the flags on `cmd`; `scope` prefixes their
// help ("local: " for precompute).
void AddStoreOptions(CLI::App* cmd, StoreFlags* flags, std::string_view scope = "");

// AddRetrievalOptions: --index-factory, --index-metric, --embedder,
// --search-mode, --retrieval-rebuild (services/retrieval_settings.h), shared
// by serve and local precompute so both open a data dir the same way.
void AddRetrievalOptions(CLI::App* cmd, services::RetrievalSettings* settings,
                         std::string_view scope = "");

// ResolvedStore: the flags parsed, the Redis password read.
struct ResolvedStore {
  uint64_t ram_budget_bytes = 0;
  uint64_t ssd_budget_bytes = 0;
  std::vector<std::string> kv_tiers;
  std::string kv_codec;
  std::string redis_url;           // as given ("" = no Redis tier)
  kvstore::RedisTierOptions redis;  // endpoints parsed from redis_url
};

// ResolveStoreFlags: InvalidArgument naming the flag for a bad size,
// duration, mode, address or password file. The Redis password comes from
// --redis-password-file (mode 600), else $RAGKV_REDIS_PASSWORD, else none:
// never from argv or a config file.
absl::StatusOr<ResolvedStore> ResolveStoreFlags(const StoreFlags& flags);

// BytesFlag: ParseByteSize (base/byte_size.h) of flag `flag`'s value;
// InvalidArgument naming the flag for a value that is not a byte size.
absl::StatusOr<uint64_t> BytesFlag(std::string_view flag, const std::string& v);

}  // namespace ragkv::cli

#endif  // RAGKV_CLI_STORE_FLAGS_H_
