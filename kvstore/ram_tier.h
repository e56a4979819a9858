// ram_tier.h: L1 -- the in-process RAM tier.
//
// A byte-budgeted, sharded map from ChunkKey to an immutable, shared
// EncodedChunk. Reads are zero-copy: GetHeader/GetLayer return PinnedBytes
// that alias the stored chunk and keep it alive (even after eviction or
// Delete) until the handle is destroyed. Memory held only by such handles is
// not charged to the budget; it is freed when the last handle goes.
//
// Budget: capacity_bytes is split evenly over num_shards; a chunk larger than
// one shard's share is rejected with ResourceExhausted (pick num_shards so
// that a shard holds several chunks: capacity / num_shards >= 4 x chunk).
// Charge per chunk = EncodedChunk::TotalBytes() + a fixed overhead.
//
// Eviction policies:
//  * kLru: classic LRU; a hit moves the entry to the front (exclusive lock).
//  * kS3Fifo: S3-FIFO (Yang et al., SOSP'23): a small FIFO S (10% of the
//    bytes), a main FIFO M and a ghost FIFO G of recently evicted keys. New
//    keys enter S (or M if in G); a hit only bumps a 2-bit atomic frequency
//    under a shared lock, so concurrent readers do not serialize. Eviction
//    from S moves entries read since insertion to M, others to G; eviction
//    from M reinserts entries with freq > 0 (decrementing it).
//
// Thread safety: all methods are thread-safe (one absl::Mutex per shard).
#ifndef RAGKV_KVSTORE_RAM_TIER_H_
#define RAGKV_KVSTORE_RAM_TIER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kvstore/tier.h"

namespace ragkv::kvstore {

enum class EvictionPolicy { kLru = 0, kS3Fifo = 1 };

struct RamTierOptions {
  // Byte budget over all shards (> 0). Default 1 GiB.
  uint64_t capacity_bytes = uint64_t{1} << 30;
  // Number of independently locked shards (1..256). Default 8.
  int num_shards = 8;
  // Eviction policy. Default S3-FIFO.
  EvictionPolicy policy = EvictionPolicy::kS3Fifo;
  // S3-FIFO: share of each shard's budget for the small queue. Default 0.1.
  double s3fifo_small_ratio = 0.1;
  // Name reported in stats. Default "ram".
  std::string name = "ram";
};

// CreateRamTier: InvalidArgument on bad options.
absl::StatusOr<std::unique_ptr<Tier>> CreateRamTier(const RamTierOptions& options);

}  // namespace ragkv::kvstore

#endif  // RAGKV_KVSTORE_RAM_TIER_H_
