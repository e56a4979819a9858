// redis_tier.h: L3 -- the remote Redis tier, shared by many sidecars.
//
// Stores each chunk's EncodedChunk blobs (kv_chunk.h) in Redis, standalone or
// Redis Cluster (slot routing, MOVED/ASK redirects, slot map refresh):
//  * one key per blob: the header under <prefix>:{<keyhex>}:h, layer i under
//    <prefix>:{<keyhex>}:L<i>. All keys of a chunk carry the hash tag
//    {<keyhex>}, so they share one cluster slot and every operation on a
//    chunk is one pipeline to one node.
//  * a layer record larger than max_value_bytes is split into parts
//    (<...>:L<i>:p<j>) so that no Redis value exceeds max_value_bytes, and is
//    reassembled on read.
//  * every value is framed (48 bytes: kind, layer, part, write id, sizes) and
//    checksummed (XXH3-64, bound to its Redis key); a value that fails is
//    reported through ReportCorruption and read as a miss, never served.
//    Parts of one layer from different Puts (torn overwrite, partial expiry or
//    eviction) are a miss.
//  * Put writes the layers first and the header last (the commit marker), in
//    one ordered pipeline, with an optional TTL; Delete removes the header
//    first. A per-fingerprint SET (<prefix>:fp:{<fphex>}) indexes chunk keys
//    for DeleteByFingerprint.
// Formats and decisions: docs/kvstore.md, "Redis tier".
//
// Failures: an unreachable node, a timeout or a Redis error is an error
// Status (UNAVAILABLE / DEADLINE_EXCEEDED / INTERNAL / RESOURCE_EXHAUSTED for
// -OOM) and is counted in TierStats::errors; TieredStore degrades it to a
// miss. A node that is down is retried with exponential backoff (calls fail
// fast meanwhile), so a dead Redis costs little latency.
//
// Thread safety: all methods are thread-safe (a connection pool per node).
// PinnedBytes returned by ReadChunk own the Redis reply (zero-copy for values
// that fit one part) and stay valid after any later Delete/Put.
#ifndef RAGKV_KVSTORE_REDIS_REDIS_TIER_H_
#define RAGKV_KVSTORE_REDIS_REDIS_TIER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvstore/tier.h"

namespace ragkv::kvstore {

namespace internal {
class RedisExecutor;
struct RedisLayoutHint;
}  // namespace internal

enum class RedisMode {
  kAuto = 0,        // cluster if the first reachable endpoint is a cluster node
  kStandalone = 1,  // one server (exactly one endpoint)
  kCluster = 2,     // Redis Cluster; endpoints are discovery seeds
};

// RedisTlsOptions: TLS to every Redis node (standalone and cluster).
struct RedisTlsOptions {
  bool enabled = false;
  // ca_file: PEM bundle the server certificate must chain to (empty = the
  // system's default trust store).
  std::string ca_file;
  // cert_file / key_file: client certificate and key (PEM) for servers that
  // require one (tls-auth-clients yes); both or neither.
  std::string cert_file;
  std::string key_file;
  // server_name: the name the server certificate must carry (and SNI); empty
  // = the endpoint's host. Verification is never switched off.
  std::string server_name;
};

struct RedisTierOptions {
  // endpoints: "host:port" list. Standalone: exactly one. Cluster: any
  // number of seed nodes. Required.
  std::vector<std::string> endpoints;
  // mode: see RedisMode. Default kAuto.
  RedisMode mode = RedisMode::kAuto;
  // connect_timeout: TCP connect limit per attempt. Default 500 ms.
  absl::Duration connect_timeout = absl::Milliseconds(500);
  // command_timeout: socket read/write limit while a command runs. Default 2 s.
  absl::Duration command_timeout = absl::Seconds(2);
  // max_value_bytes: largest Redis value written (frame included); larger
  // layer records are split. 4 KiB .. 512 MiB (Redis' proto-max-bulk-len
  // default). Default 8 MiB.
  uint64_t max_value_bytes = uint64_t{8} << 20;
  // max_chunk_bytes: a Put of a larger EncodedChunk is ResourceExhausted.
  // Default 4 GiB.
  uint64_t max_chunk_bytes = uint64_t{4} << 30;
  // max_pipeline_bytes: Put splits its writes (and Get its multi-part reads)
  // into pipelines of about this many bytes, bounding client buffers.
  // Default 64 MiB.
  uint64_t max_pipeline_bytes = uint64_t{64} << 20;
  // key_prefix: namespace of every key (no '{', '}' or whitespace; not
  // empty). Sidecars that share chunks must use the same prefix. Default "ragkv".
  std::string key_prefix = "ragkv";
  // pool_size: connections per Redis node (>= 1). Default 4.
  int pool_size = 4;
  // ttl: expiry of every key written (0 = none). Default none.
  absl::Duration ttl = absl::ZeroDuration();
  // username / password: AUTH (Redis 6 ACL user, or the legacy password
  // alone when username is empty; empty password = no AUTH). Never logged.
  std::string username;
  std::string password;
  // tls: connect over TLS (OpenSSL; hiredis 0.14 has no TLS of its own).
  RedisTlsOptions tls;
  // budget_bytes: the most bytes of values this namespace (key_prefix) may
  // hold in Redis, shared by every sidecar using it (0 = unbounded: Redis'
  // own maxmemory policy decides). Over budget, the chunks written longest
  // ago are deleted (see "Byte budget" in docs/kvstore.md). Default 0.
  uint64_t budget_bytes = 0;
  // reconnect_backoff_initial / _max: while a node is down, calls fail fast
  // and reconnects are spaced (doubling) between these. Defaults 20 ms / 1 s.
  absl::Duration reconnect_backoff_initial = absl::Milliseconds(20);
  absl::Duration reconnect_backoff_max = absl::Seconds(1);
  // name: reported in stats/logs. Default "redis".
  std::string name = "redis";
};

// RedisTier: see the file comment.
class RedisTier : public Tier {
 public:
  // Create: validates options (InvalidArgument), connects and detects the
  // mode. UNAVAILABLE / DEADLINE_EXCEEDED when no endpoint answers (message
  // names the endpoints and the OS error); FAILED_PRECONDITION when
  // kCluster is forced on a standalone server.
  static absl::StatusOr<std::unique_ptr<RedisTier>> Create(RedisTierOptions options);
  ~RedisTier() override;

  std::string_view Name() const override { return options_.name; }
  TierKind Kind() const override { return TierKind::kRemote; }
  // ReadChunk: header and layers in one pipeline (one round trip) when the
  // chunk's layout matches the layout hint (the part counts of the last
  // chunk this tier read or wrote; chunks of one model share it); otherwise,
  // or for layers beyond the hint, one more pipeline (a layer split into
  // parts is reassembled). kStream: the first pipeline carries the header
  // and layer 0 only, and the following ones 1, 2, 4, ... layers, so layer
  // 0 arrives after one small round trip. kHeaderOnly: the header alone.
  // Layers are delivered after their pipeline has been read completely and
  // its connection released: a reader that blocks (backpressure) never holds
  // a pooled connection, so several streams consumed in lockstep cannot
  // starve the pool.
  absl::Status ReadChunk(const ChunkKey& key, ChunkReader& reader, ReadMode mode) override;
  absl::StatusOr<bool> Contains(const ChunkKey& key) override;
  // Put: InvalidArgument if the header blob's layer count differs from
  // chunk->layers.size(); ResourceExhausted beyond max_chunk_bytes, when the
  // header value exceeds max_value_bytes, or on Redis -OOM (the previous
  // content of other keys is intact; a partially overwritten same key reads
  // as a miss).
  absl::Status Put(const ChunkKey& key, std::shared_ptr<const EncodedChunk> chunk) override;
  // BeginPut: ResourceExhausted above max_chunk_bytes; otherwise nullptr
  // (the chunk is gathered and Put whole, in one ordered pipeline).
  absl::StatusOr<std::unique_ptr<ChunkWriter>> BeginPut(const ChunkKey& key, std::string header,
                                                         uint64_t total_bytes) override;
  absl::Status Delete(const ChunkKey& key) override;
  absl::StatusOr<uint64_t> DeleteByFingerprint(const Fingerprint& fp) override;

  // cluster_mode: whether the tier talks to a Redis Cluster.
  bool cluster_mode() const { return cluster_mode_; }
  // Describe: e.g. "redis 127.0.0.1:6379" or "redis-cluster(3 masters)".
  std::string Describe() const;
  // Stats: the counters plus `up` (0 after a round trip that could not reach
  // its node -- UNAVAILABLE or DEADLINE_EXCEEDED --, 1 again after the next
  // one that did; in cluster mode, the last round trip to any node decides)
  // and `outages` (1 -> 0 transitions).
  TierStats Stats() const override;

 private:
  RedisTier(RedisTierOptions options, std::unique_ptr<internal::RedisExecutor> exec,
            bool cluster_mode);
  // DeleteImpl: removes `key`; *removed says whether a header existed.
  absl::Status DeleteImpl(const ChunkKey& key, bool* removed);
  absl::Status CountError(absl::Status s);
  // Byte budget (redis_tier_budget.cc; no-ops when budget_bytes is 0).
  // ReserveBudget: accounts `value_bytes` for `key` before its Put, then
  // deletes the oldest-written chunks while the namespace is over budget.
  // ForgetBudget: drops the accounting of a deleted (or vanished) key.
  absl::Status ReserveBudget(const ChunkKey& key, uint64_t value_bytes);
  absl::Status ForgetBudget(const ChunkKey& key);
  // LayoutHint / SetLayoutHint: part counts per layer of the last chunk seen.
  std::vector<uint32_t> LayoutHint() const;
  void SetLayoutHint(const std::vector<uint32_t>& parts);

  const RedisTierOptions options_;
  // health_: reachability as seen by every round trip (TierStats::up and
  // ::outages); exec_ is wrapped to update it, so it is declared first.
  struct Health {
    std::atomic<bool> up{true};
    std::atomic<uint64_t> outages{0};
  };
  Health health_;
  // budget_used_ / budget_entries_: the namespace's accounted bytes and
  // chunks as of this process's last budget round trip (TierStats).
  std::atomic<uint64_t> budget_used_{0};
  std::atomic<uint64_t> budget_entries_{0};
  const std::unique_ptr<internal::RedisExecutor> exec_;
  const bool cluster_mode_;
  const std::unique_ptr<internal::RedisLayoutHint> hint_;
};

// ParseRedisAddress: "host:port[,host:port...]", optionally with the scheme
// redis:// or rediss:// (TLS: sets options->tls.enabled), into
// options->endpoints. InvalidArgument for an empty list, a malformed
// endpoint, or credentials in the address ("user:pass@": secrets never go
// on a command line; use the password file or environment instead).
absl::Status ParseRedisAddress(std::string_view address, RedisTierOptions* options);

// CreateRedisTier: RedisTier::Create as a Tier (same errors).
absl::StatusOr<std::unique_ptr<Tier>> CreateRedisTier(const RedisTierOptions& options);

}  // namespace ragkv::kvstore

#endif  // RAGKV_KVSTORE_REDIS_REDIS_TIER_H_
