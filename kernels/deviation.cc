#include "kernels/deviation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/internal/check.h"
#include "kernels/internal/isa.h"

namespace ragkv::kernels {

absl::Status KvDeviation(TensorView a, TensorView b, float* out, bool accumulate) {
  RETURN_IF_ERROR(internal::CheckView(a, "KvDeviation a", 3, DType::kF32));
  RETURN_IF_ERROR(internal::CheckView(b, "KvDeviation b", 3, DType::kF32));
  RETURN_IF_ERROR(internal::CheckUnitLast(a, "KvDeviation a"));
  RETURN_IF_ERROR(internal::CheckUnitLast(b, "KvDeviation b"));
  if (!internal::SameShape(a, b)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvDeviation: shape mismatch ", a.DebugString(), " vs ", b.DebugString()));
  }
  const int64_t heads = a.shape[0], tokens = a.shape[1], hd = a.shape[2];
  if (tokens == 0) return absl::OkStatus();
  if (out == nullptr) return absl::InvalidArgumentError("KvDeviation: null out");
  const internal::IsaTable& isa = internal::ActiveTable();
  const int threads = tokens > 1 && a.numel() >= (1 << 15) ? MaxThreads() : 1;
  const float* pa = a.as<const float>();
  const float* pb = b.as<const float>();
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t t = 0; t < tokens; ++t) {
    float s = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
      s += isa.sq_diff_sum(pa + h * a.stride[0] + t * a.stride[1],
                           pb + h * b.stride[0] + t * b.stride[1], hd);
    }
    out[t] = accumulate ? out[t] + s : s;
  }
  return absl::OkStatus();
}

absl::Status TopK(const float* scores, int64_t n, int64_t k, int32_t* out_indices) {
  if (n < 0 || k < 0 || k > n) {
    return absl::InvalidArgumentError(absl::StrCat("TopK: need 0 <= k <= n, got k=", k, " n=", n));
  }
  if (n > INT32_MAX) return absl::InvalidArgumentError("TopK: n exceeds int32 indices");
  if (k == 0) return absl::OkStatus();
  if (scores == nullptr || out_indices == nullptr) {
    return absl::InvalidArgumentError("TopK: null scores or out_indices");
  }
  // "a ranks before b": higher score, NaN lowest, ties by lower index.
  auto before = [scores](int32_t a, int32_t b) {
    const float sa = scores[a], sb = scores[b];
    const bool na = std::isnan(sa), nb = std::isnan(sb);
    if (na != nb) return nb;
    if (!na && sa != sb) return sa > sb;
    return a < b;
  };
  // Min-heap (by rank) of the best k seen so far: O(n log k).
  std::vector<int32_t> heap;
  heap.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t idx = static_cast<int32_t>(i);
    if (static_cast<int64_t>(heap.size()) < k) {
      heap.push_back(idx);
      std::push_heap(heap.begin(), heap.end(), before);
    } else if (before(idx, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), before);
      heap.back() = idx;
      std::push_heap(heap.begin(), heap.end(), before);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), before);
  std::copy(heap.begin(), heap.end(), out_indices);
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
