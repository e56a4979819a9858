// fanout_writer.h: the write-through side of TieredStore::BeginPut: one
// chunk streamed layer by layer into every tier's ChunkWriter at once.
#ifndef RAGKV_KVSTORE_INTERNAL_FANOUT_WRITER_H_
#define RAGKV_KVSTORE_INTERNAL_FANOUT_WRITER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/tier.h"

namespace ragkv::kvstore::internal {

// FanoutTarget: tier `index` (named `name`): its writer, or the error its
// BeginPut returned.
struct FanoutTarget {
  size_t index = 0;
  std::string name;
  std::unique_ptr<ChunkWriter> writer;
  absl::Status begin_error;
};

// NewFanoutWriter: verifies each layer record against `header` (when
// `verify`) and passes it to every live target. A target that fails is
// dropped (its writer aborts); from `best_effort_from` on, a failure while
// a tier above is still live only counts in `*tier_errors`; any other
// failure is returned at once (the caller then destroys the fan-out writer,
// which aborts every tier: nothing is committed anywhere). Commit commits
// the tiers in order under the same rule. Errors name the tier.
std::unique_ptr<ChunkWriter> NewFanoutWriter(KvChunkHeader header, bool verify,
                                             std::vector<FanoutTarget> targets,
                                             size_t best_effort_from,
                                             std::atomic<uint64_t>* tier_errors);

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_INTERNAL_FANOUT_WRITER_H_
