#include "kernels/quant.h"

#include <algorithm>
#include <vector>


#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/internal/check.h"
#include "kernels/internal/isa.h"

namespace ragkv::kernels {
namespace {

absl::Status CheckQuantView(const TensorView& x, const char* what) {
  RETURN_IF_ERROR(internal::CheckView(x, what, 3, DType::kF32));
  if (!x.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": must be contiguous"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status QuantizeInt8PerChannel(TensorView x, int8_t* q, float* scales) {
  RETURN_IF_ERROR(CheckQuantView(x, "QuantizeInt8PerChannel x"));
  const int64_t groups = x.shape[0], rows = x.shape[1], ch = x.shape[2];
  if (groups * ch == 0) return absl::OkStatus();
  if (scales == nullptr || (q == nullptr && rows > 0)) {
    return absl::InvalidArgumentError("QuantizeInt8PerChannel: null q or scales");
  }
  const internal::IsaTable& isa = internal::ActiveTable();
  const float* px = x.as<const float>();
  // Work items are (group, block of rows) so every thread has work even with
  // few groups: pass 1 takes per-block column maxima, a reduction turns them
  // into scales, pass 2 quantizes.
  constexpr int64_t kRowBlock = 256;
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowBlock - 1) / kRowBlock);
  const int64_t items = groups * blocks;
  const int threads = items > 1 && x.numel() >= (1 << 15) ? MaxThreads() : 1;
  thread_local std::vector<float> block_max;
  block_max.assign(static_cast<size_t>(items * ch), 0.0f);
  float* bm = block_max.data();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t g = it / blocks, r0 = (it % blocks) * kRowBlock;
      const int64_t r1 = std::min(rows, r0 + kRowBlock);
      for (int64_t r = r0; r < r1; ++r) isa.absmax_accum(px + (g * rows + r) * ch, bm + it * ch, ch);
    }
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      float* sc = scales + g * ch;
      for (int64_t c = 0; c < ch; ++c) sc[c] = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const float* m = bm + (g * blocks + b) * ch;
        for (int64_t c = 0; c < ch; ++c) sc[c] = std::max(sc[c], m[c]);
      }
      for (int64_t c = 0; c < ch; ++c) sc[c] = sc[c] > 0.0f ? sc[c] / 127.0f : 1.0f;
    }
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t g = it / blocks, r0 = (it % blocks) * kRowBlock;
      const int64_t r1 = std::min(rows, r0 + kRowBlock);
      for (int64_t r = r0; r < r1; ++r)
        isa.quant_row(px + (g * rows + r) * ch, scales + g * ch, q + (g * rows + r) * ch, ch);
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeInt8PerChannel(const int8_t* q, const float* scales, TensorView out) {
  RETURN_IF_ERROR(CheckQuantView(out, "DequantizeInt8PerChannel out"));
  const int64_t groups = out.shape[0], rows = out.shape[1], ch = out.shape[2];
  if (out.numel() == 0) return absl::OkStatus();
  if (q == nullptr || scales == nullptr) {
    return absl::InvalidArgumentError("DequantizeInt8PerChannel: null q or scales");
  }
  const internal::IsaTable& isa = internal::ActiveTable();
  float* po = out.as<float>();
  const int64_t items = groups * rows;
  const int threads = items > 1 && out.numel() >= (1 << 15) ? MaxThreads() : 1;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t g = it / rows;
    isa.dequant_row(q + it * ch, scales + g * ch, po + it * ch, ch);
  }
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
