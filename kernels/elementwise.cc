#include "kernels/elementwise.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/convert.h"
#include "kernels/cpu.h"
#include "kernels/internal/isa.h"
#include "kernels/internal/rows.h"

namespace ragkv::kernels {
namespace {

constexpr int64_t kParallelMinElems = 1 << 15;

int ThreadsFor(int64_t rows, int64_t cols) {
  return rows > 1 && rows * cols >= kParallelMinElems ? MaxThreads() : 1;
}

absl::Status SameRows(const internal::Rows& a, const internal::Rows& b, const char* what) {
  if (a.rows != b.rows || a.cols != b.cols) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape mismatch [", a.rows, ",",
                                                   a.cols, "] vs [", b.rows, ",", b.cols, "]"));
  }
  return absl::OkStatus();
}

// GluRows: gate, up and out of a gated unit `op` ("SwiGlu", "GeGluGgml") as
// rows of one shape; errors name op and the operand.
absl::Status GluRows(const char* op, const TensorView& gate, const TensorView& up,
                     const TensorView& out, internal::Rows* gr, internal::Rows* ur,
                     internal::Rows* orr) {
  RETURN_IF_ERROR(internal::AsRows(gate, absl::StrCat(op, " gate"), gr));
  RETURN_IF_ERROR(internal::AsRows(up, absl::StrCat(op, " up"), ur));
  RETURN_IF_ERROR(internal::AsRows(out, absl::StrCat(op, " out"), orr));
  RETURN_IF_ERROR(SameRows(*gr, *ur, absl::StrCat(op, " gate/up").c_str()));
  return SameRows(*gr, *orr, absl::StrCat(op, " gate/out").c_str());
}

}  // namespace

absl::Status RmsNorm(TensorView x, TensorView weight, float eps, TensorView out) {
  internal::Rows xr, orr, wr;
  RETURN_IF_ERROR(internal::AsRows(x, "RmsNorm x", &xr));
  RETURN_IF_ERROR(internal::AsRows(out, "RmsNorm out", &orr));
  RETURN_IF_ERROR(SameRows(xr, orr, "RmsNorm x/out"));
  if (weight.rank != 1) return absl::InvalidArgumentError("RmsNorm: weight must be rank 1");
  RETURN_IF_ERROR(internal::AsRows(weight, "RmsNorm weight", &wr));
  if (wr.cols != xr.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("RmsNorm: weight ", weight.DebugString(), " vs dim ", xr.cols));
  }
  if (xr.cols == 0) return absl::InvalidArgumentError("RmsNorm: dim is 0");
  const internal::IsaTable& isa = internal::ActiveTable();
  const int threads = ThreadsFor(xr.rows, xr.cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t r = 0; r < xr.rows; ++r) {
    isa.rmsnorm_row(xr.data + r * xr.row_stride, wr.data, eps, orr.data + r * orr.row_stride,
                    xr.cols);
  }
  return absl::OkStatus();
}

absl::Status SwiGlu(TensorView gate, TensorView up, TensorView out) {
  internal::Rows gr, ur, orr;
  RETURN_IF_ERROR(GluRows("SwiGlu", gate, up, out, &gr, &ur, &orr));
  const internal::IsaTable& isa = internal::ActiveTable();
  const int threads = ThreadsFor(gr.rows, gr.cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t r = 0; r < gr.rows; ++r) {
    isa.swiglu_row(gr.data + r * gr.row_stride, ur.data + r * ur.row_stride,
                   orr.data + r * orr.row_stride, gr.cols);
  }
  return absl::OkStatus();
}

namespace {
// GeluTable: ggml_table_gelu_f16 (ggml-cpu.c): for every f16 bit pattern
// i, f16(gelu_tanh(float(i))). Built once, thread-safe (static local).
const std::vector<uint16_t>& GeluTable() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(65536);
    constexpr float kA = 0.044715f, kS = 0.79788456080286535587989211986876f;
    for (uint32_t i = 0; i < 65536; ++i) {
      const float f = HalfToFloat(static_cast<uint16_t>(i));
      t[i] = FloatToHalf(0.5f * f * (1.0f + tanhf(kS * f * (1.0f + kA * f * f))));
    }
    return t;
  }();
  return table;
}
}  // namespace

float GeluGgmlScalar(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return HalfToFloat(GeluTable()[FloatToHalf(x)]);
}

absl::Status GeGluGgml(TensorView gate, TensorView up, TensorView out) {
  internal::Rows gr, ur, orr;
  RETURN_IF_ERROR(GluRows("GeGluGgml", gate, up, out, &gr, &ur, &orr));
  const uint16_t* table = GeluTable().data();
  const int threads = ThreadsFor(gr.rows, gr.cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t r = 0; r < gr.rows; ++r) {
    const float* g = gr.data + r * gr.row_stride;
    const float* u = ur.data + r * ur.row_stride;
    float* o = orr.data + r * orr.row_stride;
    for (int64_t j = 0; j < gr.cols; ++j) {
      const float x = g[j];
      o[j] = x <= -10.0f ? 0.0f
             : x >= 10.0f ? x * u[j]
                          : HalfToFloat(table[FloatToHalf(x)]) * u[j];
    }
  }
  return absl::OkStatus();
}

absl::Status Softmax(TensorView x) {
  internal::Rows xr;
  RETURN_IF_ERROR(internal::AsRows(x, "Softmax x", &xr));
  const internal::IsaTable& isa = internal::ActiveTable();
  const int threads = ThreadsFor(xr.rows, xr.cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t r = 0; r < xr.rows; ++r) isa.softmax_row(xr.data + r * xr.row_stride, xr.cols);
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
