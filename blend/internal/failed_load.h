// failed_load.h (internal): the FailedLoad payload of a Blend's error
// (blend/blender.h FailedLoadOf).
#ifndef RAGKV_BLEND_INTERNAL_FAILED_LOAD_H_
#define RAGKV_BLEND_INTERNAL_FAILED_LOAD_H_

#include "absl/status/status.h"

namespace ragkv::blend::internal {

// WithFailedLoad: `status` carrying FailedLoad{segment, layer}, unless it is
// Cancelled (the caller went away: nothing to recompute).
absl::Status WithFailedLoad(absl::Status status, int segment, int layer);

}  // namespace ragkv::blend::internal

#endif  // RAGKV_BLEND_INTERNAL_FAILED_LOAD_H_
