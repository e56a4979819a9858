// redis_tier_internal.h: what the three files of RedisTier share (private to
// kvstore): redis_tier.cc (options, connection, health), redis_tier_read.cc
// (Get*, ReadChunk, Contains) and redis_tier_write.cc (Put, Delete*).
//
// Thread safety: RedisLayoutHint is guarded by its mutex; the rest are pure
// functions.
#ifndef RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_TIER_INTERNAL_H_
#define RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_TIER_INTERNAL_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "kvstore/redis/internal/redis_record.h"
#include "base/sync.h"

namespace ragkv::kvstore::internal {

// RedisLayoutHint: the part counts per layer of the last chunk the tier read
// or wrote (RedisTier::ReadChunk fetches that layout speculatively).
struct RedisLayoutHint {
  mutable Mutex mu;
  std::vector<uint32_t> parts ABSL_GUARDED_BY(mu);
};

struct HeaderValue {
  std::string_view blob;
  std::vector<uint32_t> part_counts;
};

// ParseHeaderValue: frame checks of a decoded header value.
absl::StatusOr<HeaderValue> ParseHeaderValue(const DecodedRedisValue& d);

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_TIER_INTERNAL_H_
