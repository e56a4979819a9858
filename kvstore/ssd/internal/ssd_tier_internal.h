// ssd_tier_internal.h: test/bench seams of the SSD tier (not a public API).
#ifndef RAGKV_KVSTORE_SSD_INTERNAL_SSD_TIER_INTERNAL_H_
#define RAGKV_KVSTORE_SSD_INTERNAL_SSD_TIER_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "kvstore/ssd/ssd_tier.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"

namespace ragkv::kvstore::internal {

// CreateSsdTierWithEnv: as CreateSsdTier, with a caller-owned rocksdb::Env
// (e.g. NewCompositeEnv over a fault-injecting FileSystemWrapper). `env`
// must outlive the tier. nullptr = the default Env.
// MakeSsdRocksOptions: the RocksDB options the SSD tier opens its database
// with (DB-wide, the "kv" family, the "meta" family); the benchmark uses them
// for its raw-RocksDB baseline.
void MakeSsdRocksOptions(const SsdTierOptions& options, rocksdb::DBOptions* db_options,
                         rocksdb::ColumnFamilyOptions* kv_options,
                         rocksdb::ColumnFamilyOptions* meta_options);

absl::StatusOr<std::unique_ptr<Tier>> CreateSsdTierWithEnv(const SsdTierOptions& options,
                                                           rocksdb::Env* env);

// SsdStoredLayer: layer `layer` of `key` as the database holds it, read
// without its header (tests: that no layer record is left behind after a
// Delete, an abort or a replacement). InvalidArgument if `tier` is not an
// SSD tier.
absl::StatusOr<std::optional<PinnedBytes>> SsdStoredLayer(Tier& tier, const ChunkKey& key,
                                                          uint32_t layer);

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_SSD_INTERNAL_SSD_TIER_INTERNAL_H_
