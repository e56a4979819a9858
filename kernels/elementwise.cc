#include "kernels/elementwise.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
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
  RETURN_IF_ERROR(internal::AsRows(gate, "SwiGlu gate", &gr));
  RETURN_IF_ERROR(internal::AsRows(up, "SwiGlu up", &ur));
  RETURN_IF_ERROR(internal::AsRows(out, "SwiGlu out", &orr));
  RETURN_IF_ERROR(SameRows(gr, ur, "SwiGlu gate/up"));
  RETURN_IF_ERROR(SameRows(gr, orr, "SwiGlu gate/out"));
  const internal::IsaTable& isa = internal::ActiveTable();
  const int threads = ThreadsFor(gr.rows, gr.cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t r = 0; r < gr.rows; ++r) {
    isa.swiglu_row(gr.data + r * gr.row_stride, ur.data + r * ur.row_stride,
                   orr.data + r * orr.row_stride, gr.cols);
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
