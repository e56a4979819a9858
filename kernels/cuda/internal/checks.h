// checks.h: host-side argument checks shared by the kernels/cuda entry
// points. Private to kernels/cuda.
#ifndef RAGKV_KERNELS_CUDA_INTERNAL_CHECKS_H_
#define RAGKV_KERNELS_CUDA_INTERNAL_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/internal/launch.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::cuda::internal {

inline bool IsFloatType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

inline int ElemCode(DType t) {
  switch (t) {
    case DType::kF16: return kElemF16;
    case DType::kBF16: return kElemBF16;
    default: return kElemF32;
  }
}

inline bool AlignedTo(const void* p, uint64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// CheckKvView: `v` is a float-typed rank-3 view with unit last stride; data
// may be null only when the view is empty.
inline absl::Status CheckKvView(const TensorView& v, const char* name) {
  if (v.rank != 3) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": want rank 3, got ", v.DebugString()));
  }
  if (!IsFloatType(v.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": dtype must be f32/f16/bf16, got ",
                                                   v.DebugString()));
  }
  if (v.shape[0] < 0 || v.shape[1] < 0 || v.shape[2] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad shape ", v.DebugString()));
  }
  if (v.stride[2] != 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": last stride must be 1"));
  }
  if (v.data == nullptr && v.shape[0] * v.shape[1] > 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": null data"));
  }
  return absl::OkStatus();
}

// StridesMultipleOf: every stride of dims [0, 2) is a multiple of n elements.
inline bool StridesMultipleOf(const TensorView& v, int64_t n) {
  return v.stride[0] % n == 0 && v.stride[1] % n == 0;
}

}  // namespace ragkv::kernels::cuda::internal

#endif  // RAGKV_KERNELS_CUDA_INTERNAL_CHECKS_H_
