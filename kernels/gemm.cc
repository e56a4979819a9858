#include "kernels/gemm.h"

#include <cblas.h>

#include <omp.h>

#include <algorithm>
#include <mutex>

#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/internal/check.h"

namespace ragkv::kernels {
namespace {

// OpenBLAS runs single-threaded, inside OpenMP slices (SlicedBlas): its own
// pthread pool next to libgomp's workers, which spin after every parallel
// region, oversubscribed the cores (the narrow F16 prefill ran at 0.59x
// llama.cpp with the pool, 1.2-1.3x without it: docs/kernels.md, Threads).
void SyncBlasThreads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Below this many multiply-adds a product runs on the calling thread.
constexpr double kSliceMacs = 1 << 20;

struct Operands {
  const float* a;
  const float* b;
  float* c;
  int64_t m, n, k, lda, ldb, ldc;
  bool trans_b;
  float alpha, beta;
};

// Blas: one single-threaded BLAS call for rows [m0, m0 + mm) and columns
// [n0, n0 + nn) of c.
void Blas(const Operands& o, int64_t m0, int64_t mm, int64_t n0, int64_t nn) {
  const float* a = o.a + m0 * o.lda;
  const float* b = o.trans_b ? o.b + n0 * o.ldb : o.b + n0;
  float* c = o.c + m0 * o.ldc + n0;
  const auto I = [](int64_t v) { return static_cast<blasint>(v); };
  if (mm == 1) {
    // One row (decode): GEMV. OpenBLAS 0.3.21 does not forward M=1 GEMMs to
    // its GEMV kernels itself.
    if (o.trans_b) {  // c[n] = alpha * b[n,k] a[k] + beta * c[n]
      cblas_sgemv(CblasRowMajor, CblasNoTrans, I(nn), I(o.k), o.alpha, b, I(o.ldb), a, 1, o.beta,
                  c, 1);
    } else {  // c[n] = alpha * b[k,n]^T a[k] + beta * c[n]
      cblas_sgemv(CblasRowMajor, CblasTrans, I(o.k), I(nn), o.alpha, b, I(o.ldb), a, 1, o.beta, c,
                  1);
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, o.trans_b ? CblasTrans : CblasNoTrans, I(mm), I(nn),
              I(o.k), o.alpha, a, I(o.lda), b, I(o.ldb), o.beta, c, I(o.ldc));
}

// SlicedBlas: c split into MaxThreads() slices of columns (rows when c is
// narrow), one single-threaded BLAS call per OpenMP thread.
void SlicedBlas(const Operands& o) {
  const double macs = static_cast<double>(o.m) * static_cast<double>(o.n) * static_cast<double>(o.k);
  const int threads = MaxThreads();
  if (threads == 1 || macs < kSliceMacs) return Blas(o, 0, o.m, 0, o.n);
  const bool by_cols = o.n >= 32 * threads || o.m < threads;
  const int64_t extent = by_cols ? o.n : o.m, align = by_cols ? 16 : 1;
  const int64_t step = ((extent + threads - 1) / threads + align - 1) / align * align;
  const int64_t slices = (extent + step - 1) / step;
#pragma omp parallel for num_threads(static_cast<int>(slices)) schedule(static)
  for (int64_t t = 0; t < slices; ++t) {
    const int64_t lo = t * step, len = std::min(step, extent - lo);
    if (by_cols) {
      Blas(o, 0, o.m, lo, len);
    } else {
      Blas(o, lo, len, 0, o.n);
    }
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

const char* BlasCoreName() {
  static const char* name = openblas_get_corename();
  return name != nullptr ? name : "?";
}

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
  SlicedBlas(Operands{a.as<const float>(), b.as<const float>(), c.as<float>(), m, n, k, lda, ldb,
                      ldc, trans_b, alpha, beta});
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
