// blend_plan.h (internal): Blender::Blend's planning step -- the request
// validated and laid out over positions (which rows are exact, selectable or
// forced; which segments are loaded; the check-layer schedule). Private to
// blend/.
#ifndef RAGKV_BLEND_INTERNAL_BLEND_PLAN_H_
#define RAGKV_BLEND_INTERNAL_BLEND_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "blend/blender.h"
#include "model/model.h"

namespace ragkv::blend::internal {

enum RowClass : uint8_t {
  kExactRow = 0,    // cached at its original offset 0: never recomputed
  kSelectable = 1,  // cached elsewhere: recomputed if selected
  kForced = 2,      // query, missed chunk, or forced by the strategy
};

// Plan: the validated request laid out over positions.
struct Plan {
  int64_t total = 0;
  int64_t query_begin = 0;
  int64_t query_tokens = 0;
  int64_t selectable = 0;
  std::vector<int32_t> tokens;      // [total]
  std::vector<uint8_t> row_class;   // [total]
  std::vector<int64_t> seg_offset;  // per segment
  std::vector<int> load_segments;   // segments whose cached KV is read
  std::vector<CheckLayer> schedule;
  bool blend_from_layer0 = false;   // selectable rows are recomputed at layer 0
};

// MakePlan: validates options and segments against `model` and lays them
// out. InvalidArgument / FailedPrecondition / OutOfRange name the problem.
absl::StatusOr<Plan> MakePlan(absl::Span<const BlendSegment> segments,
                              const BlendOptions& options, const model::Model& model);

}  // namespace ragkv::blend::internal

#endif  // RAGKV_BLEND_INTERNAL_BLEND_PLAN_H_
