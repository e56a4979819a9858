// neighbour_records.h: neighbour-aware records of catalogue chunks
// (FusionRAG-style; docs/kv_format.md and docs/retrieval.md
// "Neighbour-aware records"): a chunk's KV computed after [BOS] + its k
// nearest chunks in the index, stored under its own key
// (blend::NeighbourKeyOf), beside the chunk's plain record.
//
//  * NeighbourContextOf: the context a chunk's record is computed after,
//    the same at precompute and at request time while the index is
//    unchanged (a changed index gives another key: a miss, then the plain
//    record).
//  * PrecomputeNeighbourRecords: the precompute pass (`ragkv precompute
//    --neighbours k`), over every chunk of the catalogue in this shard.
//
// Thread safety: both are reentrant; they only read the retriever and the
// model and Put into the (thread-safe) store.
#ifndef RAGKV_PIPELINE_NEIGHBOUR_RECORDS_H_
#define RAGKV_PIPELINE_NEIGHBOUR_RECORDS_H_

#include <cstdint>
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
// (null: none), then the tokens of chunk `chunk_id`'s `k` nearest chunks
// (retrieval::Retriever::NearestChunks), the nearest last, next to the
// chunk. nullopt when the chunk has no neighbour (a one-chunk index).
// Errors: those of NearestChunks (NotFound, FailedPrecondition for an
// untrained index, InvalidArgument for k).
absl::StatusOr<std::optional<blend::NeighbourContext>> NeighbourContextOf(
    const retrieval::Retriever& retriever, const model::Tokenizer* tokenizer, int64_t chunk_id,
    int k);

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
  int max_failures_listed = 20;
};

struct NeighbourPrecomputeStats {
  int64_t chunks = 0;    // distinct chunks of this shard
  int64_t computed = 0;  // records written
  int64_t skipped = 0;   // already stored (or no neighbour at all)
  int64_t failed = 0;    // e.g. context + chunk over the model's context
  uint64_t bytes = 0;    // bytes written
  uint64_t context_tokens = 0;  // sum of the contexts' lengths of the computed records
  double seconds = 0;
  std::vector<std::string> failures;  // "chunk <id>: <reason>", the first ones
};

// PrecomputeNeighbourRecords: for each distinct chunk of the catalogue in
// this shard, its NeighbourContextOf and, unless already stored (or
// `replace`), blend::PrecomputeAndStoreWithNeighbours. Per-chunk failures
// are counted, not returned. Errors: InvalidArgument for missing pointers or
// k < 1; the catalogue's read errors.
absl::StatusOr<NeighbourPrecomputeStats> PrecomputeNeighbourRecords(
    const NeighbourPrecomputeOptions& options);

}  // namespace ragkv::pipeline

#endif  // RAGKV_PIPELINE_NEIGHBOUR_RECORDS_H_
