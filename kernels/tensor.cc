#include "kernels/tensor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ragkv::kernels {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI8: return "i8";
  }
  return "?";
}

TensorView TensorView::Contiguous(void* data, DType dtype, std::initializer_list<int64_t> dims) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(dims.size() > kMaxRank ? kMaxRank : dims.size());
  int i = 0;
  for (int64_t d : dims) {
    if (i >= kMaxRank) break;
    v.shape[i++] = d;
  }
  int64_t s = 1;
  for (int j = v.rank - 1; j >= 0; --j) {
    v.stride[j] = s;
    s *= v.shape[j];
  }
  return v;
}

TensorView TensorView::Strided(void* data, DType dtype, std::initializer_list<int64_t> dims,
                               std::initializer_list<int64_t> strides) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  if (dims.size() != strides.size() || dims.size() > kMaxRank) return v;
  v.rank = static_cast<int>(dims.size());
  std::copy(dims.begin(), dims.end(), v.shape);
  std::copy(strides.begin(), strides.end(), v.stride);
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool TensorView::IsContiguous() const {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    // Size-1 dims may carry any stride.
    if (shape[i] != 1 && stride[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

std::string TensorView::DebugString() const {
  std::string s = absl::StrCat(DTypeName(dtype), "[");
  for (int i = 0; i < rank; ++i) absl::StrAppend(&s, i ? "," : "", shape[i]);
  absl::StrAppend(&s, "]");
  return s;
}

}  // namespace ragkv::kernels
