// ssd_tier.cc: CreateSsdTier (kvstore/ssd/ssd_tier.h) and the seams of
// kvstore/ssd/internal/ssd_tier_internal.h: option checks, the O_DIRECT probe and
// the RocksDB options. The tier itself is internal::SsdTier
// (kvstore/ssd/internal/ssd_tier_impl.{h,cc}).
#include "kvstore/ssd/ssd_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "base/log.h"
#include "base/rocksdb_glue.h"
#include "base/status_macros.h"
#include "kvstore/ssd/internal/ssd_tier_impl.h"
#include "kvstore/ssd/internal/ssd_tier_internal.h"
#include "rocksdb/cache.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"

namespace ragkv::kvstore {
namespace {

// DirectIoSupported: whether files under `dir` (created if missing) can be
// opened with O_DIRECT (tmpfs, for one, refuses it).
bool DirectIoSupported(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string probe = dir + "/.ragkv_direct_io_probe";
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  ::close(fd);
  fd = ::open(probe.c_str(), O_RDONLY | O_DIRECT);
  const bool ok = fd >= 0;
  if (ok) ::close(fd);
  ::unlink(probe.c_str());
  return ok;
}


}  // namespace

namespace internal {

void MakeSsdRocksOptions(const SsdTierOptions& options, rocksdb::DBOptions* db_options,
                         rocksdb::ColumnFamilyOptions* kv_options,
                         rocksdb::ColumnFamilyOptions* meta_options) {
  db_options->create_if_missing = true;
  db_options->create_missing_column_families = true;
  db_options->max_total_wal_size = uint64_t{512} << 20;
  db_options->max_background_jobs = 2;
  db_options->use_direct_reads = options.use_direct_reads;
  // A cache: a torn last record (kill -9) is dropped; damage elsewhere in the
  // WAL fails the open, and SsdTier::Open then quarantines the directory and
  // starts empty, loudly, rather than silently dropping later writes.
  db_options->wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  db_options->listeners.push_back(std::make_shared<ragkv::NoAutoRecovery>());
  db_options->info_log = std::make_shared<ragkv::RocksLogger>("ssd tier " + options.path);

  kv_options->enable_blob_files = true;
  kv_options->min_blob_size = options.min_blob_size;
  kv_options->blob_file_size = options.blob_file_size;
  kv_options->enable_blob_garbage_collection = true;
  kv_options->blob_compression_type = rocksdb::kNoCompression;  // the codec compresses
  kv_options->compression = rocksdb::kNoCompression;
  kv_options->write_buffer_size = 64 << 20;
  kv_options->max_write_buffer_number = 3;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  kv_options->table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  meta_options->table_factory = kv_options->table_factory;
}

absl::StatusOr<std::unique_ptr<Tier>> CreateSsdTierWithEnv(const SsdTierOptions& options,
                                                           rocksdb::Env* env) {
  if (options.path.empty()) return absl::InvalidArgumentError("SsdTierOptions.path is required");
  if (options.capacity_bytes == 0) {
    return absl::InvalidArgumentError("SsdTierOptions.capacity_bytes must be > 0");
  }
  if (options.read_threads < 1 || options.read_threads > 64) {
    return absl::InvalidArgumentError("SsdTierOptions.read_threads must be in [1, 64]");
  }
  SsdTierOptions opts = options;
  if (opts.use_direct_reads && !DirectIoSupported(opts.path)) {
    RAGKV_LOG(INFO) << "ssd tier '" << opts.name << "': " << opts.path
                    << " does not support O_DIRECT; using buffered reads";
    opts.use_direct_reads = false;
  }
  auto tier = std::make_unique<SsdTier>(opts, env);
  RETURN_IF_ERROR(tier->Open());
  return std::unique_ptr<Tier>(std::move(tier));
}

absl::StatusOr<std::optional<PinnedBytes>> SsdStoredLayer(Tier& tier, const ChunkKey& key,
                                                          uint32_t layer) {
  auto* ssd = dynamic_cast<SsdTier*>(&tier);
  if (ssd == nullptr) return absl::InvalidArgumentError("SsdStoredLayer: not an SSD tier");
  return ssd->ReadLayer(key, layer);
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Tier>> CreateSsdTier(const SsdTierOptions& options) {
  return internal::CreateSsdTierWithEnv(options, nullptr);
}

}  // namespace ragkv::kvstore
