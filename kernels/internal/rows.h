// rows.h (internal): views as a matrix of rows (rank 1 = one row, rank 2).
#ifndef RAGKV_KERNELS_INTERNAL_ROWS_H_
#define RAGKV_KERNELS_INTERNAL_ROWS_H_

#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/internal/check.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::internal {

struct Rows {
  float* data = nullptr;
  int64_t rows = 0, cols = 0, row_stride = 0;
};

// AsRows: an f32 rank-1 ([cols]) or rank-2 ([rows, cols]) view with unit
// column stride.
inline absl::Status AsRows(const TensorView& v, absl::string_view what, Rows* out) {
  if (v.rank != 1 && v.rank != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected rank 1 or 2, got ", v.DebugString()));
  }
  absl::Status s = CheckView(v, what, v.rank, DType::kF32);
  if (!s.ok()) return s;
  s = CheckUnitLast(v, what);
  if (!s.ok()) return s;
  out->data = v.as<float>();
  out->rows = v.rank == 2 ? v.shape[0] : 1;
  out->cols = v.shape[v.rank - 1];
  out->row_stride = v.rank == 2 ? v.stride[0] : out->cols;
  return absl::OkStatus();
}

}  // namespace ragkv::kernels::internal

#endif  // RAGKV_KERNELS_INTERNAL_ROWS_H_
