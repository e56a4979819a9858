#include "kernels/quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
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

absl::Status CheckDequantView(const TensorView& out, const char* what) {
  RETURN_IF_ERROR(internal::CheckView(out, what, 3, DType::kF32));
  return internal::CheckUnitLast(out, what);
}

// ForEachRow: fn(group, flat row index g*rows+r, row pointer) over every
// row of a [groups, rows, channels] view, threaded when the view is large.
template <typename Fn>
void ForEachRow(const TensorView& out, Fn fn) {
  const int64_t rows = out.shape[1];
  const int64_t items = out.shape[0] * rows;
  const int threads = items > 1 && out.numel() >= (1 << 15) ? MaxThreads() : 1;
  float* base = out.as<float>();
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t g = it / rows, r = it % rows;
    fn(g, it, base + g * out.stride[0] + r * out.stride[1]);
  }
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
  RETURN_IF_ERROR(CheckDequantView(out, "DequantizeInt8PerChannel out"));
  const int64_t ch = out.shape[2];
  if (out.numel() == 0) return absl::OkStatus();
  if (q == nullptr || scales == nullptr) {
    return absl::InvalidArgumentError("DequantizeInt8PerChannel: null q or scales");
  }
  const internal::IsaTable& isa = internal::ActiveTable();
  ForEachRow(out, [&](int64_t g, int64_t it, float* row) {
    isa.dequant_row(q + it * ch, scales + g * ch, row, ch);
  });
  return absl::OkStatus();
}

float Fp8E4M3ToFloat(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  if (e == 0xF && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                           : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return (code & 0x80) ? -mag : mag;
}

uint8_t FloatToFp8E4M3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (!(a < 448.0f)) return sign | 0x7E;  // saturate (callers refuse NaN first)
  if (a < 0.015625f) {                    // below 2^-6: subnormal steps of 2^-9
    // nearbyint rounds half to even under the default rounding mode; 8 steps
    // are the smallest normal, whose code is 0x08, so the sum is the code.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  uint32_t b;
  std::memcpy(&b, &a, sizeof(b));
  b += 0x7FFFFu + ((b >> 20) & 1u);  // round the 23-bit mantissa to 3 bits, ties to even
  const int e = static_cast<int>(b >> 23) - 127 + 7;
  const uint32_t code = (static_cast<uint32_t>(e) << 3) | ((b >> 20) & 7u);
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7E));
}

absl::Status QuantizeFp8E4M3PerGroup(TensorView x, uint8_t* q, float* scales) {
  RETURN_IF_ERROR(CheckQuantView(x, "QuantizeFp8E4M3PerGroup x"));
  const int64_t groups = x.shape[0], per = x.shape[1] * x.shape[2];
  if (groups == 0) return absl::OkStatus();
  if (scales == nullptr || (q == nullptr && per > 0)) {
    return absl::InvalidArgumentError("QuantizeFp8E4M3PerGroup: null q or scales");
  }
  const float* px = x.as<const float>();
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = px + g * per;
    float amax = 0.0f;
    for (int64_t i = 0; i < per; ++i) {
      if (!std::isfinite(xg[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "QuantizeFp8E4M3PerGroup: non-finite value ", xg[i], " in group ", g));
      }
      amax = std::max(amax, std::fabs(xg[i]));
    }
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    scales[g] = scale;
    // Divide (no reciprocal): 1/scale overflows for heads below ~1e-36.
    for (int64_t i = 0; i < per; ++i) q[g * per + i] = FloatToFp8E4M3(xg[i] / scale);
  }
  return absl::OkStatus();
}

absl::Status DequantizeFp8E4M3PerGroup(const uint8_t* q, const float* scales, TensorView out) {
  RETURN_IF_ERROR(CheckDequantView(out, "DequantizeFp8E4M3PerGroup out"));
  const int64_t ch = out.shape[2];
  if (out.numel() == 0) return absl::OkStatus();
  if (q == nullptr || scales == nullptr) {
    return absl::InvalidArgumentError("DequantizeFp8E4M3PerGroup: null q or scales");
  }
  static const std::array<float, 256> lut = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    return t;
  }();
  ForEachRow(out, [&](int64_t g, int64_t it, float* row) {
    const uint8_t* qr = q + it * ch;
    const float s = scales[g];
    for (int64_t c = 0; c < ch; ++c) row[c] = lut[qr[c]] * s;
  });
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
