// internal/check_finite.h: the one check that a vector holds no NaN or inf
// (embedder output, caller vectors, index input, queries).
#ifndef RAGKV_RETRIEVAL_INTERNAL_CHECK_FINITE_H_
#define RAGKV_RETRIEVAL_INTERNAL_CHECK_FINITE_H_

#include <cmath>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ragkv::retrieval::internal {

// CheckFinite: InvalidArgument naming `what` and the first non-finite element.
inline absl::Status CheckFinite(absl::Span<const float> v, absl::string_view what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": non-finite value at element ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace ragkv::retrieval::internal

#endif  // RAGKV_RETRIEVAL_INTERNAL_CHECK_FINITE_H_
