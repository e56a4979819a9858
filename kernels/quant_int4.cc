// quant_int4.cc: 4-bit asymmetric group quantization of KV tensors (the
// store's int4 codec; kernels/quant.h, docs/kv_format.md).
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/convert.h"
#include "kernels/cpu.h"
#include "kernels/internal/check.h"
#include "kernels/quant.h"

namespace ragkv::kernels {
namespace {

constexpr int64_t kG = kInt4GroupSize;
constexpr float kHalfMax = 65504.0f;

// HalfDown / HalfUp: the largest f16 <= x / the smallest f16 >= x (x finite,
// |x| <= 65504), so a group's range [lo, lo + 15 * step] covers its values.
uint16_t HalfDown(float x) {
  const uint16_t h = FloatToHalf(x);
  if (HalfToFloat(h) <= x) return h;
  if (h == 0x0000) return 0x8001;  // +0 > x: the smallest negative subnormal
  return (h & 0x8000) ? h + 1 : h - 1;
}

uint16_t HalfUp(float x) {
  const uint16_t h = FloatToHalf(x);
  if (HalfToFloat(h) >= x) return h;
  if (h == 0x8000) return 0x0001;  // -0 < x: the smallest positive subnormal
  return (h & 0x8000) ? h - 1 : h + 1;
}

int64_t Groups(int64_t n) { return (n + kG - 1) / kG; }

// Geometry: where group p's elements are in a contiguous [H, T, D] tensor.
// kRows: p = (h * ceil(T/32) + g) * D + d, elements (h, 32g + i, d);
// kChannels: p = (h * T + t) * ceil(D/32) + g, elements (h, t, 32g + i).
struct Geometry {
  int64_t H, T, D;
  Int4Axis axis;
  int64_t count() const { return axis == Int4Axis::kRows ? H * Groups(T) * D : H * T * Groups(D); }
  // First element, element stride and length of group p.
  void Group(int64_t p, int64_t* first, int64_t* stride, int64_t* len) const {
    if (axis == Int4Axis::kRows) {
      const int64_t d = p % D, hg = p / D, g = hg % Groups(T), h = hg / Groups(T);
      *first = (h * T + g * kG) * D + d, *stride = D, *len = std::min(kG, T - g * kG);
    } else {
      const int64_t g = p % Groups(D), ht = p / Groups(D);
      *first = ht * D + g * kG, *stride = 1, *len = std::min(kG, D - g * kG);
    }
  }
};

void PutNibble(uint8_t* codes, int64_t e, uint8_t q) {
  uint8_t& b = codes[e >> 1];
  b = (e & 1) ? static_cast<uint8_t>((b & 0x0F) | (q << 4)) : static_cast<uint8_t>((b & 0xF0) | q);
}

// UnpackRow: the n codes from element e0 on, as floats.
void UnpackRow(const uint8_t* codes, int64_t e0, int64_t n, float* q) {
  int64_t i = 0;
  if (e0 & 1) q[i++] = static_cast<float>(codes[e0 >> 1] >> 4);
  const uint8_t* b = codes + ((e0 + i) >> 1);
  const int64_t pairs = (n - i) / 2;
  for (int64_t j = 0; j < pairs; ++j) {
    q[i + 2 * j] = static_cast<float>(b[j] & 0x0F);
    q[i + 2 * j + 1] = static_cast<float>(b[j] >> 4);
  }
  i += 2 * pairs;
  if (i < n) q[i] = static_cast<float>(b[pairs] & 0x0F);
}

// QuantizeGroup: one group's (step, lo) and codes; false on a value outside
// what the codec can represent (non-finite or beyond the f16 range).
bool QuantizeGroup(const float* x, int64_t first, int64_t stride, int64_t len, uint8_t* codes,
                   uint16_t* param) {
  float mn = x[first], mx = x[first];
  for (int64_t i = 0; i < len; ++i) {
    const float v = x[first + i * stride];
    if (!(std::fabs(v) <= kHalfMax)) return false;
    mn = std::min(mn, v), mx = std::max(mx, v);
  }
  const uint16_t lo_h = HalfDown(mn);
  const float lo = HalfToFloat(lo_h);
  const float span = mx - lo;
  const uint16_t step_h = span > 0.0f ? HalfUp(span / 15.0f) : 0;
  const float step = HalfToFloat(step_h);
  param[0] = step_h, param[1] = lo_h;
  for (int64_t i = 0; i < len; ++i) {
    const int64_t e = first + i * stride;
    const float q = step > 0.0f ? std::nearbyint((x[e] - lo) / step) : 0.0f;
    PutNibble(codes, e, static_cast<uint8_t>(std::clamp(q, 0.0f, 15.0f)));
  }
  return true;
}

}  // namespace

int64_t Int4ParamCount(int64_t heads, int64_t rows, int64_t channels, Int4Axis axis) {
  return Geometry{heads, rows, channels, axis}.count();
}

absl::Status QuantizeInt4Grouped(TensorView x, Int4Axis axis, uint8_t* codes, uint16_t* params) {
  RETURN_IF_ERROR(internal::CheckView(x, "QuantizeInt4Grouped x", 3, DType::kF32));
  if (!x.IsContiguous()) return absl::InvalidArgumentError("QuantizeInt4Grouped x: must be contiguous");
  const Geometry geo{x.shape[0], x.shape[1], x.shape[2], axis};
  const int64_t n = x.numel();
  if (n == 0) return absl::OkStatus();
  if (codes == nullptr || params == nullptr) {
    return absl::InvalidArgumentError("QuantizeInt4Grouped: null codes or params");
  }
  if (n & 1) codes[n >> 1] = 0;  // the unused high nibble of an odd count
  const float* px = x.as<const float>();
  const int64_t count = geo.count();
  // Groups of the kRows axis share bytes between neighbouring channels, so
  // each thread takes whole heads (no two threads write one byte: a head
  // holds an even number of nibbles).
  const bool even_heads = (geo.T * geo.D) % 2 == 0;
  const int threads = n >= (1 << 15) && geo.H > 1 && even_heads ? MaxThreads() : 1;
  const int64_t per_head = count / geo.H;
  int64_t bad = -1;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t h = 0; h < geo.H; ++h) {
    for (int64_t p = h * per_head; p < (h + 1) * per_head; ++p) {
      int64_t first, stride, len;
      geo.Group(p, &first, &stride, &len);
      if (!QuantizeGroup(px, first, stride, len, codes, params + 2 * p)) {
#pragma omp critical(ragkv_int4_bad)
        bad = bad < 0 ? p : std::min(bad, p);
      }
    }
  }
  if (bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QuantizeInt4Grouped: group ", bad, " holds a non-finite value or one beyond the f16 range "
        "(|x| > 65504), which the int4 codec cannot represent"));
  }
  return absl::OkStatus();
}

absl::Status DequantizeInt4Grouped(const uint8_t* codes, const uint16_t* params, Int4Axis axis,
                                   TensorView out) {
  RETURN_IF_ERROR(internal::CheckView(out, "DequantizeInt4Grouped out", 3, DType::kF32));
  RETURN_IF_ERROR(internal::CheckUnitLast(out, "DequantizeInt4Grouped out"));
  const int64_t H = out.shape[0], T = out.shape[1], D = out.shape[2];
  if (out.numel() == 0) return absl::OkStatus();
  if (codes == nullptr || params == nullptr) {
    return absl::InvalidArgumentError("DequantizeInt4Grouped: null codes or params");
  }
  // The parameters (1/16 of the elements) widen once, in bulk, into split
  // step and lo arrays; each row then decodes with plain loops.
  const int64_t count = Geometry{H, T, D, axis}.count();
  std::vector<float> pairs(static_cast<size_t>(2 * count)), step(static_cast<size_t>(count)),
      lo(static_cast<size_t>(count));
  RETURN_IF_ERROR(Convert(TensorView::Contiguous(const_cast<uint16_t*>(params), DType::kF16, {2 * count}),
                          TensorView::Contiguous(pairs.data(), DType::kF32, {2 * count})));
  for (int64_t p = 0; p < count; ++p) step[p] = pairs[2 * p], lo[p] = pairs[2 * p + 1];
  const int64_t items = H * T;
  const int threads = items > 1 && out.numel() >= (1 << 15) ? MaxThreads() : 1;
  float* base = out.as<float>();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<float> q(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t h = it / T, t = it % T;
      UnpackRow(codes, it * D, D, q.data());
      float* row = base + h * out.stride[0] + t * out.stride[1];
      if (axis == Int4Axis::kRows) {  // one (step, lo) per channel of the row's token group
        const int64_t p0 = (h * Groups(T) + t / kG) * D;
        const float* st = step.data() + p0;
        const float* lw = lo.data() + p0;
        for (int64_t d = 0; d < D; ++d) row[d] = lw[d] + st[d] * q[d];
      } else {  // one per group of 32 channels
        for (int64_t g = 0; g < Groups(D); ++g) {
          const float st = step[it * Groups(D) + g], lw = lo[it * Groups(D) + g];
          const int64_t d1 = std::min(D, (g + 1) * kG);
          for (int64_t d = g * kG; d < d1; ++d) row[d] = lw + st * q[d];
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
