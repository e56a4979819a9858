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
#include "absl/status/statusor.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/tier.h"

namespace ragkv::kvstore::internal {

// FanoutTarget: tier `index` (named `name`): its streaming writer, or the
// tier whose Put takes the gathered chunk at Commit (`gather`: a tier whose
// BeginPut returned no writer), or the error its BeginPut returned.
struct FanoutTarget {
  size_t index = 0;
  std::string name;
  std::unique_ptr<ChunkWriter> writer;
  Tier* gather = nullptr;
  absl::Status begin_error;
};

// NewFanoutWriter: verifies each layer record against `header` (decoded
// from `header_blob`; when `verify`) and passes it to every live streaming
// target; while a gather target is live, the records are also gathered,
// once for all of them, and Commit hands that one shared chunk to each
// gather target's Put. A target that fails is
// dropped (its writer aborts); from `best_effort_from` on, a failure while
// a tier above is still live only counts in `*tier_errors`; any other
// failure is returned at once (the caller then destroys the fan-out writer,
// which aborts every tier: nothing is committed anywhere). Commit commits
// the tiers in order under the same rule. Errors name the tier; a begin
// error that fails the write is returned by NewFanoutWriter itself.
absl::StatusOr<std::unique_ptr<ChunkWriter>> NewFanoutWriter(KvChunkHeader header, std::string header_blob,
                                             bool verify,
                                             std::vector<FanoutTarget> targets,
                                             size_t best_effort_from,
                                             std::atomic<uint64_t>* tier_errors);

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_INTERNAL_FANOUT_WRITER_H_
