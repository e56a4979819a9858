// ssd_tier_internal.h: test/bench seams of the SSD tier (not a public API).
#ifndef RAGKV_KVSTORE_INTERNAL_SSD_TIER_INTERNAL_H_
#define RAGKV_KVSTORE_INTERNAL_SSD_TIER_INTERNAL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kvstore/ssd_tier.h"
#include "rocksdb/env.h"

namespace ragkv::kvstore::internal {

// CreateSsdTierWithEnv: as CreateSsdTier, with a caller-owned rocksdb::Env
// (e.g. NewCompositeEnv over a fault-injecting FileSystemWrapper). `env`
// must outlive the tier. nullptr = the default Env.
absl::StatusOr<std::unique_ptr<Tier>> CreateSsdTierWithEnv(const SsdTierOptions& options,
                                                           rocksdb::Env* env);

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_INTERNAL_SSD_TIER_INTERNAL_H_
