// check.h (internal): argument validation shared by the public entry points.
#ifndef RAGKV_KERNELS_INTERNAL_CHECK_H_
#define RAGKV_KERNELS_INTERNAL_CHECK_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::internal {

// CheckView: non-null data (unless numel is 0), rank, dtype, no negative dims.
inline absl::Status CheckView(const TensorView& v, absl::string_view what, int rank, DType dtype) {
  if (v.rank != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected rank ", rank, ", got ", v.DebugString()));
  }
  if (v.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected dtype ", DTypeName(dtype),
                                                   ", got ", v.DebugString()));
  }
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0)
      return absl::InvalidArgumentError(absl::StrCat(what, ": negative dim in ", v.DebugString()));
  }
  if (v.data == nullptr && v.numel() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null data for ", v.DebugString()));
  }
  return absl::OkStatus();
}

// CheckUnitLast: the last dim has unit stride (or size <= 1).
inline absl::Status CheckUnitLast(const TensorView& v, absl::string_view what) {
  if (v.rank > 0 && v.shape[v.rank - 1] > 1 && v.stride[v.rank - 1] != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": last dim must have unit stride, got ", v.stride[v.rank - 1]));
  }
  return absl::OkStatus();
}

inline bool SameShape(const TensorView& a, const TensorView& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

}  // namespace ragkv::kernels::internal

#endif  // RAGKV_KERNELS_INTERNAL_CHECK_H_
