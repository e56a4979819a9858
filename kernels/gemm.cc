#include "kernels/gemm.h"

#include <cblas.h>

#include <atomic>

#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/internal/check.h"

namespace ragkv::kernels {
namespace {

// OpenBLAS keeps its own pool; apply the process-wide cap whenever it changed
// since the last call (SetMaxThreads also applies it directly).
void SyncBlasThreads() {
  static std::atomic<int> applied{0};
  const int want = MaxThreads();
  if (applied.load(std::memory_order_relaxed) != want) {
    openblas_set_num_threads(want);
    applied.store(want, std::memory_order_relaxed);
  }
}

absl::Status CheckMatrix(const TensorView& v, const char* what) {
  RETURN_IF_ERROR(internal::CheckView(v, what, 2, DType::kF32));
  RETURN_IF_ERROR(internal::CheckUnitLast(v, what));
  if (v.shape[0] > 1 && v.stride[0] < v.shape[1]) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": row stride ", v.stride[0],
                                                   " < cols ", v.shape[1]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(TensorView a, TensorView b, bool trans_b, TensorView c, float alpha,
                  float beta) {
  RETURN_IF_ERROR(CheckMatrix(a, "Gemm a"));
  RETURN_IF_ERROR(CheckMatrix(b, "Gemm b"));
  RETURN_IF_ERROR(CheckMatrix(c, "Gemm c"));
  const int64_t m = a.shape[0], k = a.shape[1];
  const int64_t n = trans_b ? b.shape[0] : b.shape[1];
  const int64_t kb = trans_b ? b.shape[1] : b.shape[0];
  if (kb != k || c.shape[0] != m || c.shape[1] != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm: shape mismatch a=", a.DebugString(), " b=", b.DebugString(),
        trans_b ? " (transposed)" : "", " c=", c.DebugString()));
  }
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    return absl::InvalidArgumentError("Gemm: dimensions exceed the BLAS int range");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  const int64_t lda = a.shape[0] > 1 ? a.stride[0] : (k > 0 ? k : 1);
  const int64_t ldb = b.shape[0] > 1 ? b.stride[0] : (b.shape[1] > 0 ? b.shape[1] : 1);
  const int64_t ldc = c.shape[0] > 1 ? c.stride[0] : n;
  if (k == 0) {  // c = beta * c
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float* p = c.as<float>() + i * ldc + j;
        *p = beta == 0.0f ? 0.0f : beta * *p;
      }
    return absl::OkStatus();
  }
  SyncBlasThreads();
  if (m == 1) {
    // One row (decode): GEMV. OpenBLAS 0.3.21 does not forward M=1 GEMMs to
    // its GEMV kernels itself.
    if (trans_b) {  // c[n] = alpha * b[n,k] a[k] + beta * c[n]
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k),
                  alpha, b.as<const float>(), static_cast<blasint>(ldb), a.as<const float>(), 1,
                  beta, c.as<float>(), 1);
    } else {  // c[n] = alpha * b[k,n]^T a[k] + beta * c[n]
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(k), static_cast<blasint>(n),
                  alpha, b.as<const float>(), static_cast<blasint>(ldb), a.as<const float>(), 1,
                  beta, c.as<float>(), 1);
    }
    return absl::OkStatus();
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
              a.as<const float>(), static_cast<blasint>(lda), b.as<const float>(),
              static_cast<blasint>(ldb), beta, c.as<float>(), static_cast<blasint>(ldc));
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
