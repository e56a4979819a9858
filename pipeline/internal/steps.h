// steps.h: the pipeline's decisions and bookkeeping around the blend
// (pipeline/pipeline.cc runs them in order). Private to pipeline/.
#ifndef RAGKV_PIPELINE_INTERNAL_STEPS_H_
#define RAGKV_PIPELINE_INTERNAL_STEPS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/blender.h"
#include "blend/loading_controller.h"
#include "pipeline/internal/layout.h"
#include "pipeline/pipeline.h"

namespace ragkv::pipeline::internal {

// DropBadRecord: deletes the record under `key` that failed with `st` (a
// record that failed to verify may still have a header, which store-back
// takes for "stored": deleted, it is rewritten); an outage (Unavailable,
// DeadlineExceeded) leaves it alone.
void DropBadRecord(const Pipeline::Options& o, const kvstore::ChunkKey& key,
                   const absl::Status& st);

// MapSegments: fills *out from the resolved pieces: leading fresh pieces
// (after an optional BOS) -> one prefix; chunks and fresh pieces between
// them -> chunks (fresh = a miss); the last -> the query; the spans.
void MapSegments(const Pipeline::Options& o, bool add_bos, const std::vector<Piece>& pieces,
                 BlendLayout* out);

// ReleaseUnused: closes the stored records that `strategy` will not read
// (full prefill: every one; prefix reuse: all but a chunk at row 0), so
// their streams stop prefetching. They are not misses, and their spans
// still say cache_hit. Returns whether any was closed (the segments must
// then be built again).
bool ReleaseUnused(blend::Strategy strategy, const BlendLayout& layout, std::vector<Piece>* pieces);

// Misses: the whole token lists of the chunks whose record missed (what
// store-back writes after the request).
struct Miss {
  kvstore::ChunkKey key;
  std::vector<int32_t> tokens;
};
std::vector<Miss> Misses(const std::vector<Piece>& pieces);

// RequestCap: the ratio cap the request chose: its ratio, or for a budget
// request (adaptive_budget, no ratio) min(1, 3 x budget); none when it
// leaves the cap to the server (default ratio, quality gate).
std::optional<double> RequestCap(const RequestOptions& ro);

// StrategyOptions: the Blender options of the request's mode (kAuto: the
// default ratio, which the controller's may replace later).
blend::BlendOptions StrategyOptions(const Pipeline::Options& o, const RequestOptions& ro);

// ApplyQualityGate: the served model's gate on the request's options (not
// when pinned): blending off -> CacheBlend / full reuse become full prefill
// (counted); on -> its selector, and its ratio when the request sets no
// RequestCap (kAuto keeps the controller's). Returns the gate's
// reason ("" without one).
std::string ApplyQualityGate(const Pipeline::Options& o, const RequestOptions& ro,
                             blend::BlendOptions* bo, bool* controlled);

// ServedTiers: the distinct cost-model tiers that serve the cached pieces,
// in order of first use.
std::vector<blend::Tier> ServedTiers(const Pipeline::Options& o, const std::vector<Piece>& pieces);

// ObserveBandwidth: with a controller, one serving tier and everything
// loaded, feeds it the tier's loading bandwidth as this blend saw it.
void ObserveBandwidth(const Pipeline::Options& o, const blend::BlendOptions& bo,
                      const std::vector<blend::Tier>& served, const std::vector<Piece>& pieces,
                      const blend::BlendResult& r);

// ObserveTierReads: each stored chunk's read time, by the tier that served
// it, for strategies that read every layer.
void ObserveTierReads(const Pipeline::Options& o, blend::Strategy strategy,
                      const std::vector<Piece>& pieces);

// FailedLoadOwner: marks the piece (or the stored exact prefix) whose load
// failed with `st` as failed, deletes a record that failed to verify, and
// describes it in *fl. False when `st` is not a failed load of a stored
// piece (the request then fails with it).
bool MarkFailedLoad(const Pipeline::Options& o, const absl::Status& st,
                    std::vector<Piece>* pieces, BlendLayout* layout, FailedLoad* fl);

}  // namespace ragkv::pipeline::internal

#endif  // RAGKV_PIPELINE_INTERNAL_STEPS_H_
