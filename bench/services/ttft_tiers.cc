// ttft_tiers.cc: the KV tiers of `ragkv bench ttft`
// (internal/ttft_internal.h): the scratch directory, cold page cache, the
// RAM / SSD / Redis stores and the private redis-server, the gRPC sidecars,
// precompute + store.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/kv_source.h"
#include "blend/store_source.h"
#include "kvstore/ram_tier.h"
#include "kvstore/redis/redis_tier.h"
#include "kvstore/ssd/ssd_tier.h"

namespace ragkv::services::ttft_internal {

// ---- Scratch directory -----------------------------------------------------

ScratchDir::~ScratchDir() {
  std::error_code ec;
  if (own_) std::filesystem::remove_all(dir_, ec);
}

absl::Status ScratchDir::Make(const std::string& requested) {
  std::string work = requested;
  bool own_work = false;
  if (work.empty()) {
    char tmpl[] = "/tmp/ragkv-ttft-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
    work = tmpl;
    own_work = true;
  }
  std::filesystem::create_directories(work);
  dir_ = work;
  own_ = own_work;
  return absl::OkStatus();
}

// ---- Cold page cache -------------------------------------------------------

int FadviseTree(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0) ++n;
    ::close(fd);
  }
  return n;
}

bool DropCachesGlobally() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "1", 1) == 1;
  ::close(fd);
  return ok;
}

// ---- TierSetup -------------------------------------------------------------

GrpcTtftPath* TierSetup::GrpcFor(const TierStore* t) {
  if (grpc.empty()) return nullptr;
  if (t == nullptr) return grpc.count("ram") ? grpc["ram"].get() : grpc.begin()->second.get();
  auto it = grpc.find(t->name);
  return it == grpc.end() ? nullptr : it->second.get();
}

void TierSetup::MakeCold(TierStore* t) const {
  if (t == nullptr || t->name != "ssd") return;
  if (cold == "drop") {
    if (!DropCachesGlobally()) FadviseTree(t->dir);
  } else if (cold == "fadvise") {
    FadviseTree(t->dir);
  }
}

TierStore* TierSetup::Ram() const {
  TierStore* ram = nullptr;
  for (auto& t : stores) {
    if (t->name == "ram") ram = t.get();
  }
  return ram;
}

// ---- Tier stores -----------------------------------------------------------

absl::Status SetupTiers(const TtftBenchOptions& o, const std::string& work, TierSetup& tiers,
                        std::vector<std::string>& notes) {
  std::string& cold = tiers.cold;
  cold = o.ssd_cold;
  for (const std::string& name : o.tiers) {
    auto ts = std::make_unique<TierStore>();
    ts->name = name;
    std::shared_ptr<kvstore::Tier> tier;
    if (name == "ram") {
      ts->tier = blend::Tier::kRam;
      kvstore::RamTierOptions ro;
      ro.capacity_bytes = uint64_t{8} << 30;
      ASSIGN_OR_RETURN(tier, kvstore::CreateRamTier(ro));
    } else if (name == "ssd") {
      ts->tier = blend::Tier::kSsd;
      ts->dir = work + "/ssd";
      kvstore::SsdTierOptions so;
      so.path = ts->dir;
      so.sync_writes = false;
      // auto: targeted fadvise on the DB files (always permitted, leaves the
      // rest of the machine's page cache alone); "drop" is the global hammer.
      if (cold == "auto") cold = "fadvise";
      if (cold == "drop" && !DropCachesGlobally()) {
        notes.push_back("drop_caches not permitted: falling back to fadvise");
        cold = "fadvise";
      }
      so.use_direct_reads = cold == "direct";
      ASSIGN_OR_RETURN(tier, kvstore::CreateSsdTier(so));
    } else if (name == "redis") {
      ts->tier = blend::Tier::kRemote;
      std::string endpoint = o.redis;
      if (endpoint.empty()) {
        if (!testing::RedisServerOnPath()) {
          notes.push_back("redis tier skipped: redis-server not on PATH and --redis not given");
          continue;
        }
        absl::StatusOr<std::unique_ptr<testing::RedisServerProcess>> started =
            testing::RedisServerProcess::Start({"--maxmemory", "0"});
        if (!started.ok()) {
          notes.push_back("redis tier skipped: " + started.status().ToString());
          continue;
        }
        tiers.redis = *std::move(started);
        endpoint = tiers.redis->endpoint();
        notes.push_back("redis tier: private redis-server on " + endpoint);
      }
      kvstore::RedisTierOptions ro;
      ro.endpoints = {endpoint};
      ASSIGN_OR_RETURN(tier, kvstore::CreateRedisTier(ro));
    } else {
      return absl::InvalidArgumentError("bench ttft: unknown tier '" + name +
                                        "' (ram, ssd, redis)");
    }
    kvstore::TieredStoreOptions tso;
    tso.promote_on_hit = false;
    ASSIGN_OR_RETURN(ts->store, kvstore::TieredStore::Create(tso, {tier}));
    tiers.stores.push_back(std::move(ts));
  }
  if (std::find(o.tiers.begin(), o.tiers.end(), "ssd") != o.tiers.end()) {
    notes.push_back(
        "ssd cold reads: " +
        std::string(cold == "drop"      ? "echo 1 > /proc/sys/vm/drop_caches before every SSD request"
                    : cold == "fadvise" ? "posix_fadvise(DONTNEED) on the RocksDB files before "
                                          "every SSD request"
                    : cold == "direct"  ? "O_DIRECT reads (RocksDB use_direct_reads)"
                                        : "none (page cache warm)"));
  }
  return absl::OkStatus();
}

// ---- The real path: one sidecar per tier on loopback ----

// Each sidecar keeps its chunks in exactly one KV tier (SidecarOptions::
// kv_tiers), so its Blend reads from that tier: RAM; SSD (O_DIRECT, the
// sidecar default, plus fadvise of its files before each request); the
// same Redis server as the in-process rows.
absl::Status StartGrpcPaths(const TtftBenchOptions& o, const std::string& work,
                            TierSetup& tiers, std::vector<Prompt>& prompts,
                            std::vector<std::string>& notes) {
  std::map<std::string, std::unique_ptr<GrpcTtftPath>>& grpc = tiers.grpc;
  for (const auto& t : tiers.stores) {
    GrpcTtftOptions go;
    go.model_spec = o.model_spec;
    go.tokenizer = o.tokenizer;
    go.max_seq_len = o.max_seq_len;
    go.chunk_tokens = o.chunk_tokens;
    go.data_dir = work + "/sidecar-" + t->name;
    go.kv_tiers = {t->name};
    if (t->name == "redis") {
      go.redis_url = tiers.redis != nullptr ? tiers.redis->endpoint() : o.redis;
    }
    ASSIGN_OR_RETURN(grpc[t->name], GrpcTtftPath::Start(go));
    notes.push_back("grpc path, " + t->name + " tier: client -> EngineService.Generate on " +
                    grpc[t->name]->address() +
                    " -> reference engine -> BlendService (loopback gRPC), fused f16 KV "
                    "streamed into the engine's cache, last query token forward, first "
                    "token; the sidecar's only KV tier is " + t->name);
  }
  if (grpc.empty()) {
    // Full prefill needs no tier: one sidecar with RAM.
    GrpcTtftOptions go;
    go.model_spec = o.model_spec;
    go.tokenizer = o.tokenizer;
    go.max_seq_len = o.max_seq_len;
    go.chunk_tokens = o.chunk_tokens;
    go.data_dir = work + "/sidecar-ram";
    ASSIGN_OR_RETURN(grpc["ram"], GrpcTtftPath::Start(go));
  }
  // Ingest every chunk as a document into each sidecar; both paths then
  // use the catalogue's tokens (identical prompts; every sidecar's
  // tokenizer and chunker are the same, checked).
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    Prompt& p = prompts[pi];
    for (auto& [name, path] : grpc) {
      ASSIGN_OR_RETURN(std::vector<CatalogueChunk> cat,
                       path->Ingest(p.texts, absl::StrCat("ttft-p", pi, "-c")));
      for (size_t ci = 0; ci < cat.size(); ++ci) {
        if (p.cat.empty()) {
          p.chunks[ci] = cat[ci].tokens;
        } else if (p.chunks[ci] != cat[ci].tokens) {
          return absl::InternalError("bench ttft: sidecars chunked a text differently");
        }
      }
      if (p.cat.empty()) p.cat = cat;
      p.cat_by_tier[name] = std::move(cat);
    }
  }
  return absl::OkStatus();
}

// ---- Precompute + store (the precompute times calibrate the planner) ----

absl::StatusOr<PrefillBest> PrecomputeAndStore(const model::Model& model, TierSetup& tiers,
                                               std::vector<Prompt>& prompts,
                                               kvstore::Codec codec, double* bytes_per_token) {
  double best_chunk_prefill_s = 1e30;
  int64_t best_chunk_tokens = 0;
  double bytes = 0, tokens = 0;
  for (Prompt& p : prompts) {
    for (size_t ci = 0; ci < p.chunks.size(); ++ci) {
      const auto& c = p.chunks[ci];
      const double t0 = Now();
      ASSIGN_OR_RETURN(blend::ChunkKV kv, blend::PrecomputeChunk(model, c));
      const double dt = Now() - t0;
      if (static_cast<int64_t>(c.size()) >= best_chunk_tokens) {
        if (static_cast<int64_t>(c.size()) > best_chunk_tokens) best_chunk_prefill_s = 1e30;
        best_chunk_tokens = static_cast<int64_t>(c.size());
        best_chunk_prefill_s = std::min(best_chunk_prefill_s, dt);
      }
      ASSIGN_OR_RETURN(blend::StoreChunk sc, blend::EncodeForStore(kv, codec));
      bytes += static_cast<double>(sc.chunk->TotalBytes());
      tokens += static_cast<double>(c.size());
      for (auto& t : tiers.stores) RETURN_IF_ERROR(t->store->Put(sc.key, sc.chunk));
      p.keys.push_back(sc.key);
      for (auto& [name, path] : tiers.grpc) {
        RETURN_IF_ERROR(path->Put(p.cat_by_tier[name][ci], kv));
      }
    }
  }
  for (auto& t : tiers.stores) RETURN_IF_ERROR(t->store->Flush());
  *bytes_per_token = tokens > 0 ? bytes / tokens : 0;
  PrefillBest best;
  best.seconds = best_chunk_prefill_s;
  best.tokens = best_chunk_tokens;
  return best;
}

}  // namespace ragkv::services::ttft_internal
