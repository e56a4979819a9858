// backends.h: Backends, the libraries one sidecar (or one local precompute
// run) works with, built from flags-level options: the model and its
// tokenizer, the tiered KV store (RAM > SSD under data_dir > optional
// Redis), the retrieval façade (catalogue + FAISS under data_dir) and the
// Blender. Owned as a unit; members are null when not requested.
// Thread safety: the members are thread-safe objects (see their headers).
#ifndef RAGKV_SERVICES_BACKENDS_H_
#define RAGKV_SERVICES_BACKENDS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/blender.h"
#include "blend/loading_controller.h"
#include "kvstore/redis/redis_tier.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "retrieval/retriever.h"
#include "services/retrieval_settings.h"

namespace ragkv::services {

struct BackendOptions {
  std::string data_dir = "./ragkv-data";  // kv/ and retrieval/ live here
  uint64_t ram_budget_bytes = uint64_t{1} << 30;
  uint64_t ssd_budget_bytes = uint64_t{16} << 30;
  // redis_url: host:port[,host:port...], optionally redis:// or rediss://
  // (TLS); empty = no Redis tier. redis: the tier's other settings (its
  // endpoints are parsed from redis_url).
  std::string redis_url;
  kvstore::RedisTierOptions redis;
  std::string model_path;      // empty = no model (and no blender)
  std::string tokenizer_path;  // empty = the model's own
  int max_seq_len = 0;         // model context override (0 = file's)
  int chunk_tokens = 128;      // retrieval chunk size (tokens)
  RetrievalSettings retrieval;
  // sync_writes: fsync every SSD-tier Put and catalogue mutation (durable
  // across power loss). false still survives kill -9 (the WAL is in the OS
  // page cache) and is what batch precompute uses (it flushes at the end).
  bool sync_writes = true;
  bool want_store = true;
  bool want_retrieval = true;
  // kv_tiers: the KV store's tiers, fastest first, from {"ram", "ssd",
  // "redis"}; empty = ram, ssd (+ redis when redis_url is set). E.g. a
  // stateless sidecar that relies on the shared tier: {"redis"}.
  // InvalidArgument for an unknown or repeated name, "redis" without
  // redis_url, or redis_url set but "redis" not listed.
  std::vector<std::string> kv_tiers;
  // With a model: a loading controller for BLEND_MODE_AUTO (quality floor
  // controller_r_min, ceiling controller_r_max).
  double controller_r_min = 0.15;
  double controller_r_max = 0.5;
  // Testing seam: when set, every KV tier is replaced by wrap_tier(tier)
  // before the store is built (fault injection around real tiers).
  std::function<std::shared_ptr<kvstore::Tier>(std::shared_ptr<kvstore::Tier>)> wrap_tier;
};

struct Backends {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::unique_ptr<kvstore::TieredStore> store;
  std::unique_ptr<retrieval::Retriever> retriever;
  // search_mode: the default mode of text queries (RetrievalSettings).
  retrieval::SearchMode search_mode = retrieval::SearchMode::kHybrid;
  std::unique_ptr<blend::Blender> blender;
  std::unique_ptr<blend::LoadingController> controller;  // with a model
  ~Backends();  // retriever saved, store flushed, in that order
};

// BuildBackends: NotFound for a missing model/tokenizer, Internal when the
// stores cannot open (e.g. a data_dir held by another process's RocksDB).
absl::StatusOr<std::unique_ptr<Backends>> BuildBackends(const BackendOptions& options);

// ResolveKvTiers: options.kv_tiers with the default applied, validated (see
// BackendOptions::kv_tiers).
absl::StatusOr<std::vector<std::string>> ResolveKvTiers(const BackendOptions& options);

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_BACKENDS_H_
