// neighbour_records.h: neighbour-aware records of catalogue chunks
// (FusionRAG-style; docs/kv_format.md and docs/retrieval.md
// "Neighbour-aware records"): a chunk's KV computed after [BOS] + its k
// nearest chunks in the index, stored under its own key
// (blend::NeighbourKeyOf), beside the chunk's plain record.
//
//  * PrecomputeNeighbourRecords: the precompute pass (`ragkv precompute
//    --neighbours k`), over every chunk of the catalogue in this shard: the
//    neighbours found in batched index searches
//    (Retriever::NearestChunkIds), recorded in the catalogue
//    (Retriever::SetChunkNeighbours), then each record computed and stored.
//  * NeighbourContextOf: the context a chunk's record was computed after,
//    from the recorded list (no search at request time).
//
// Thread safety: both are reentrant; they only read the retriever and the
// model and Put into the (thread-safe) store. The pass runs its own
// `workers` threads; its callbacks are serialized.
#ifndef RAGKV_PIPELINE_NEIGHBOUR_RECORDS_H_
#define RAGKV_PIPELINE_NEIGHBOUR_RECORDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/store_source.h"
#include "kvstore/kv_chunk.h"

namespace ragkv::kvstore {
class TieredStore;
}
namespace ragkv::model {
class Model;
class Tokenizer;
}  // namespace ragkv::model
namespace ragkv::retrieval {
class Retriever;
}

namespace ragkv::pipeline {

// NeighbourContextOf: lead = {BOS} when `tokenizer` starts prompts with one
// (null: none), then the tokens of the k neighbours recorded for chunk
// `chunk_id` (Retriever::ChunkNeighbours), the nearest last, next to the
// chunk. nullopt when none was recorded, the list is empty, or a
// neighbour has been deleted since. Errors: the catalogue's.
absl::StatusOr<std::optional<blend::NeighbourContext>> NeighbourContextOf(
    const retrieval::Retriever& retriever, const model::Tokenizer* tokenizer, int64_t chunk_id,
    int k);

struct NeighbourPrecomputeStats;
// NeighbourFailure: one chunk whose record the pass could not write.
struct NeighbourFailure {
  int64_t chunk_id = 0;
  std::string reason;  // the status, as text
};

struct NeighbourPrecomputeOptions {
  const model::Model* model = nullptr;          // required
  const model::Tokenizer* tokenizer = nullptr;  // BOS rule (null: no BOS)
  retrieval::Retriever* retriever = nullptr;    // required
  kvstore::TieredStore* store = nullptr;        // required
  int neighbours = 1;                           // k, >= 1
  kvstore::Codec codec = kvstore::Codec::kRaw;  // of the records written
  // This worker's share: chunks whose plain key's Lo64() % shard_count ==
  // shard_index (the precompute job's rule). Default 0/1: all.
  uint32_t shard_index = 0, shard_count = 1;
  bool replace = false;  // recompute records already stored
  int workers = 1;       // threads computing records (the batch's search is one call)
  int max_failures_listed = 20;
  // cancelled: polled before each chunk (by every worker); true stops the
  // pass (the records stored so far stay; stats.cancelled is set). Null:
  // never.
  std::function<bool()> cancelled;
  // on_progress: called with the running stats once the chunks are listed
  // and after each chunk, one call at a time (from the workers). Null: none.
  std::function<void(const NeighbourPrecomputeStats&)> on_progress;
  // on_failure: called for each failed chunk, before its on_progress.
  std::function<void(const NeighbourFailure&)> on_failure;
};

struct NeighbourPrecomputeStats {
  int64_t chunks = 0;    // chunks of this shard
  int64_t computed = 0;  // records written
  int64_t skipped = 0;   // already stored (or no neighbour at all)
  int64_t failed = 0;    // e.g. context + chunk over the model's context
  uint64_t bytes = 0;    // bytes written
  uint64_t context_tokens = 0;  // sum of the contexts' lengths of the computed records
  uint64_t chunk_tokens = 0;    // sum of the computed records' own chunk lengths
  double seconds = 0;
  bool cancelled = false;  // stopped by options.cancelled
  std::vector<NeighbourFailure> failures;  // the first max_failures_listed
};

// PrecomputeNeighbourRecords: for each chunk of the catalogue in this
// shard, 256 at a time: their k nearest chunks (Retriever::NearestChunkIds,
// one batched search), recorded (Retriever::SetChunkNeighbours, replacing
// an earlier list), then, unless already stored (or `replace`),
// blend::PrecomputeAndStoreWithNeighbours. Per-chunk failures
// are counted, not returned; a cancelled pass returns the stats so far. Errors: InvalidArgument for missing pointers or
// k < 1; the catalogue's read errors.
absl::StatusOr<NeighbourPrecomputeStats> PrecomputeNeighbourRecords(
    const NeighbourPrecomputeOptions& options);

}  // namespace ragkv::pipeline

#endif  // RAGKV_PIPELINE_NEIGHBOUR_RECORDS_H_
