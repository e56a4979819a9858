// redis_cluster.h: Redis Cluster routing for the Redis tier (private to
// kvstore).
//
// KeySlot implements the Redis Cluster spec's key -> slot map (CRC16/XMODEM of
// the key, or of its first non-empty {hash tag}, mod 16384). RedisCluster is a
// RedisExecutor that keeps a slot -> master map (from CLUSTER SLOTS), one
// RedisNodePool per master, and follows redirects:
//   -MOVED <slot> <host:port>  the slot has a new owner: the slot map entry is
//                              updated at once, a full refresh is scheduled,
//                              and the command is re-sent to the new owner.
//   -ASK <slot> <host:port>    the slot is migrating and this key lives on the
//                              target: the command is re-sent there prefixed
//                              by ASKING; the slot map is left unchanged.
//   -TRYAGAIN                  re-sent after a short pause.
// A node that cannot be reached triggers a (rate-limited) slot map refresh so
// that a failover is picked up; the call itself fails with UNAVAILABLE.
//
// Thread safety: all methods are thread-safe.
#ifndef RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_CLUSTER_H_
#define RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_CLUSTER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvstore/redis/internal/redis_client.h"

namespace ragkv::kvstore::internal {

inline constexpr int kRedisClusterSlots = 16384;

// Crc16: CRC-16/XMODEM (poly 0x1021, init 0), the checksum Redis Cluster uses.
uint16_t Crc16(std::string_view data);

// KeySlot: the cluster slot of `key` (0..16383). If the key contains "{...}"
// with at least one character between the first '{' and the next '}', only
// that substring is hashed.
int KeySlot(std::string_view key);

// RedisClusterOptions: how to find and talk to a cluster.
struct RedisClusterOptions {
  // seeds: one or more nodes used for discovery (CLUSTER SLOTS); any master or
  // replica will do. Required.
  std::vector<RedisEndpoint> seeds;
  // node: per-node pool settings (its connection.endpoint is ignored).
  RedisNodePoolOptions node;
  // max_redirects: MOVED/ASK/TRYAGAIN hops followed per call. Default 5.
  int max_redirects = 5;
  // min_refresh_interval: slot map refreshes triggered by errors are at most
  // this frequent. Default 100 ms.
  absl::Duration min_refresh_interval = absl::Milliseconds(100);
};

// RedisCluster: RedisExecutor over a Redis Cluster (masters only).
class RedisCluster : public RedisExecutor {
 public:
  // Create: discovers the slot map from the first seed that answers.
  // UNAVAILABLE when no seed answers; FAILED_PRECONDITION when the seeds are
  // not cluster nodes.
  static absl::StatusOr<std::unique_ptr<RedisCluster>> Create(RedisClusterOptions options);

  // Pipeline: see RedisExecutor. The pipeline goes to the owner of
  // `routing_key`'s slot; a command whose key lives elsewhere is redirected
  // on its own (MOVED/ASK name the key's slot), so commands for several slots
  // of one node (grouped by NodeKeyFor) are fine too.
  absl::StatusOr<std::vector<Reply>> Pipeline(std::string_view routing_key,
                                              absl::Span<const RedisArgv> commands) override;
  std::string NodeKeyFor(std::string_view routing_key) const override;
  std::string Describe() const override;

  // RefreshSlotMap: re-reads CLUSTER SLOTS from a known node (or a seed).
  absl::Status RefreshSlotMap();
  // NodeForSlot: the master currently believed to own `slot`, if any.
  std::optional<RedisEndpoint> NodeForSlot(int slot) const;
  // Masters: the distinct masters of the current slot map.
  std::vector<RedisEndpoint> Masters() const;
  // SetSlotOwnerForTesting: overwrites one slot map entry (to test MOVED).
  void SetSlotOwnerForTesting(int slot, const RedisEndpoint& node);

  // Redirect counters, for tests and metrics.
  int64_t moved_redirects() const { return moved_.load(std::memory_order_relaxed); }
  int64_t ask_redirects() const { return ask_.load(std::memory_order_relaxed); }
  int64_t slot_refreshes() const { return refreshes_.load(std::memory_order_relaxed); }

 private:
  explicit RedisCluster(RedisClusterOptions options);
  // PoolFor: the pool of `node`, created on first use.
  RedisNodePool* PoolFor(const RedisEndpoint& node) ABSL_LOCKS_EXCLUDED(mu_);
  // MaybeRefresh: RefreshSlotMap unless one ran within min_refresh_interval.
  void MaybeRefresh();
  absl::Status RefreshFrom(RedisNodePool* pool);
  void SetSlotOwner(int slot, const RedisEndpoint& node) ABSL_LOCKS_EXCLUDED(mu_);

  const RedisClusterOptions options_;
  mutable absl::Mutex mu_;
  // Pools are never destroyed before the cluster object, so raw pointers to
  // them stay valid for the object's lifetime.
  std::map<std::string, std::unique_ptr<RedisNodePool>> pools_ ABSL_GUARDED_BY(mu_);
  // slot_owner_[slot]: index into nodes_, or -1 when not covered.
  std::array<int16_t, kRedisClusterSlots> slot_owner_ ABSL_GUARDED_BY(mu_);
  std::vector<RedisEndpoint> nodes_ ABSL_GUARDED_BY(mu_);
  absl::Mutex refresh_mu_;
  absl::Time last_refresh_ ABSL_GUARDED_BY(refresh_mu_) = absl::InfinitePast();
  std::atomic<int64_t> moved_{0};
  std::atomic<int64_t> ask_{0};
  std::atomic<int64_t> refreshes_{0};
};

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_CLUSTER_H_
