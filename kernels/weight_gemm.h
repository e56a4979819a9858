// weight_gemm.h: matrix products with a weight kept in its file's encoding
// (f32, f16, bf16 or a ggml block type, kernels/ggml_quant.h), so a model's
// RSS is its file's size, not a widened f32 copy (docs/kernels.md).
//
// WeightGemm(x, W, y): y = x * W^T (+ beta * y), W [n, k] row-major (out x
// in, as checkpoints store it), x [m, k], y [m, n]. f32 weights go straight
// to kernels::Gemm. Other encodings are processed in tiles of W's rows: a
// tile is dequantized (bit-exactly as ggml does) into a cache-sized f32
// buffer and multiplied there -- by sgemm when x has many rows (prefill: the
// dequantization is amortized over them), by vector dot products per row
// when it has few (decode, 1-8 rows), tiles spread over MaxThreads() threads.
// Q8_0 weights take llama.cpp's int8 path instead for decode rows, and for
// every row count on CPUs with AMX: x is quantized to q8_0 blocks and
// multiplied in int8 (AMX tiles, AVX-512 VNNI / AVX2 / scalar dots;
// kernels/internal/q8.h), so such a product carries x's int8 rounding, as
// llama.cpp's does. Without AMX, prefill rows keep dequantize-then-sgemm.
// Thread-safe; scratch is per thread.
#ifndef RAGKV_KERNELS_WEIGHT_GEMM_H_
#define RAGKV_KERNELS_WEIGHT_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/ggml_quant.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

// WeightMatrix: a [rows, cols] weight in `type`, rows contiguous row_bytes
// apart. A view: does not own `data`.
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
  // Rows: the sub-matrix of rows [r0, r0 + n) (a view of the same bytes).
  WeightMatrix Rows(int64_t r0, int64_t n) const;
  // bytes: rows * row_bytes.
  uint64_t bytes() const { return static_cast<uint64_t>(rows) * row_bytes; }
};

// MakeWeightMatrix: a view of `rows` x `cols` elements of `type` at `data`;
// InvalidArgument when cols is not whole blocks of the type, or data is null.
absl::StatusOr<WeightMatrix> MakeWeightMatrix(GgmlType type, const void* data, int64_t rows,
                                              int64_t cols);
// F32Matrix: the view of an f32 [rows, cols] array.
WeightMatrix F32Matrix(const float* data, int64_t rows, int64_t cols);

// DequantizeRows: rows [r0, r0 + n) of w into f32 out [n, w.cols].
absl::Status DequantizeRows(const WeightMatrix& w, int64_t r0, int64_t n, float* out);

// WeightGemm: y = x * w^T + beta * y. x, y: f32 rank-2 views, unit column
// stride; x.shape = [m, w.cols], y.shape = [m, w.rows]. InvalidArgument on a
// shape or dtype mismatch.
absl::Status WeightGemm(TensorView x, const WeightMatrix& w, TensorView y, float beta = 0.0f);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_WEIGHT_GEMM_H_
