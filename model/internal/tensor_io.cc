#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/convert.h"
#include "model/internal/loaders.h"

namespace ragkv::model::internal {

absl::Status ReadTensorF32(const MappedFile& f, uint64_t offset, kernels::DType dtype,
                           uint64_t numel, const std::string& what, std::vector<float>* out) {
  const uint64_t esize = kernels::DTypeSize(dtype);
  if (dtype != kernels::DType::kF32 && dtype != kernels::DType::kF16 &&
      dtype != kernels::DType::kBF16) {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": tensor ", what, " has unsupported dtype ", kernels::DTypeName(dtype)));
  }
  if (numel > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": tensor ", what, " is implausibly large"));
  }
  RETURN_IF_ERROR(f.Check(offset, numel * esize, absl::StrCat("tensor ", what)));
  out->resize(numel);
  if (numel == 0) return absl::OkStatus();
  const uint8_t* src = f.data() + offset;
  if (dtype == kernels::DType::kF32) {
    std::memcpy(out->data(), src, numel * 4);
    return absl::OkStatus();
  }
  // Half types: copy to an aligned buffer when the mapping is misaligned.
  std::vector<uint16_t> tmp;
  const void* p = src;
  if (reinterpret_cast<uintptr_t>(src) % 2 != 0) {
    tmp.resize(numel);
    std::memcpy(tmp.data(), src, numel * 2);
    p = tmp.data();
  }
  absl::Status s = kernels::Convert(
      kernels::TensorView::Contiguous(p, dtype, {static_cast<int64_t>(numel)}),
      kernels::TensorView::Contiguous(out->data(), kernels::DType::kF32,
                                      {static_cast<int64_t>(numel)}));
  if (!s.ok()) return absl::InternalError(absl::StrCat(f.path(), ": tensor ", what, ": ", s.message()));
  return absl::OkStatus();
}

absl::Status CheckShape(const std::string& file, const std::string& name,
                        const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
  if (got != want) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": tensor ", name, " has shape [",
                                                   absl::StrJoin(got, ","), "], expected [",
                                                   absl::StrJoin(want, ","), "]"));
  }
  return absl::OkStatus();
}

}  // namespace ragkv::model::internal
