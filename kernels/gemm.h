// gemm.h: single-precision GEMM through OpenBLAS (cblas_sgemm).
#ifndef RAGKV_KERNELS_GEMM_H_
#define RAGKV_KERNELS_GEMM_H_

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

// Gemm: c = alpha * a * op(b) + beta * c, all f32 rank-2 views with unit
// column stride (row stride = leading dimension, may exceed cols).
//   a: [m, k]; b: [k, n] (trans_b=false) or [n, k] (trans_b=true, i.e. a
//   weight matrix stored out x in, as checkpoints do); c: [m, n].
// Returns InvalidArgument on dtype/shape/stride mismatch or null data.
// Runs on MaxThreads() OpenMP threads, each a single-threaded OpenBLAS call
// on a slice of c (OpenBLAS never starts its own pool).
// BlasCoreName: the kernel set OpenBLAS chose for this CPU (its dynamic
// dispatch, or OPENBLAS_CORETYPE when set), e.g. "Cooperlake", "Haswell":
// benchmarks print it, since it decides every f32 GEMM's speed.
const char* BlasCoreName();

absl::Status Gemm(TensorView a, TensorView b, bool trans_b, TensorView c, float alpha = 1.0f,
                  float beta = 0.0f);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_GEMM_H_
