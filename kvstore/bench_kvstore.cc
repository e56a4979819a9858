#include "kvstore/bench_kvstore.h"

namespace ragkv::kvstore {

absl::StatusOr<std::vector<KvBenchRow>> RunKvStoreBench(const KvBenchOptions& options,
                                                        std::FILE* out) {
  return absl::UnimplementedError("kvstore bench: not yet implemented");
}

}  // namespace ragkv::kvstore
