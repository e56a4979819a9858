// prefix_cache.h: the pipeline's exact-prefix cache (step 2) inside blends (issue
// 20, "exact prefixes are exact rows"; blend/prefix_source.h for the block
// chain and its records).
//
// Before a blend, the longest stored chain of blocks covering the prompt's
// leading tokens (before the query) becomes the Blender's exact first
// segment: loaded, never recomputed, not counted in r. After it, the blocks
// of the rows the blend computed exactly (the stored prefix, then the fresh
// rows that follow it up to the first reused chunk; under full prefill or
// prefix caching every row before the query) are stored, off the request's
// path, so the next prompt with the same beginning (BOS, system prompt,
// leading chunks in the same order) finds them. Private to pipeline/.
#ifndef RAGKV_PIPELINE_INTERNAL_PREFIX_CACHE_H_
#define RAGKV_PIPELINE_INTERNAL_PREFIX_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/blender.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "pipeline/internal/layout.h"
#include "pipeline/pipeline.h"

namespace ragkv::pipeline::internal {


// ApplyPrefixCache: puts the longest stored exact prefix of the prompt in
// front of layout->segs (layout->exact, exact_tokens): segments it covers
// are dropped (their pieces marked covered, their sources released), the
// one it cuts keeps its rows after it (a cached piece through a
// SliceKvSource of its source). Not used when it would cut a first segment
// that is exact already (a chunk at offset 0: its tail would become
// approximate rows). A no-op when `enabled` is false, when this call's
// prefix failed already, or when nothing is stored; counted in the
// metrics. Errors: the store's.
absl::Status ApplyPrefixCache(const Pipeline::Options& o, bool enabled, std::vector<Piece>* pieces,
                              BlendLayout* layout);

// ExactRows: the leading rows of the fused cache that `strategy` computed
// exactly (see the file comment), never past the query's first row. Reads
// the segments' sources: call it before they are released.
int64_t ExactRows(const BlendLayout& layout, blend::Strategy strategy);

// StorePrefixCache: the whole blocks in [exact prefix end, min(exact_rows,
// max_tokens)) of the fused cache `cache`, in the model's KV dtype with the
// store-back codec, handed to the store-back executor (best effort: an
// error is logged). A no-op when `store_back` is null.
void StorePrefixCache(const Pipeline::Options& o, StoreBack* store_back, const BlendLayout& layout,
                      const std::vector<Piece>& pieces, const model::KVCache& cache,
                      int64_t exact_rows);

}  // namespace ragkv::pipeline::internal

#endif  // RAGKV_PIPELINE_INTERNAL_PREFIX_CACHE_H_
