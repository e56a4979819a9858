// quant.h: 8- and 4-bit quantization of KV tensors (the store's int8, fp8
// and int4 codecs, docs/kv_format.md).
//
// int8 per channel: for x: [groups, rows, channels] (for KV: [kv_heads,
// tokens, head_dim]) each (group, channel) column gets scale = max_rows |x| /
// 127 (1 if the column is all zero) and q = round(x / scale) clamped to
// [-127, 127]. The absolute error per element is at most scale / 2.
//
// fp8 e4m3 per group (OCP "E4M3FN": bias 7, no infinities, max 448,
// subnormals down to 2^-9; codes 0x7F / 0xFF are NaN and never produced):
// each group (KV head) gets scale = max |x| / 448 (1 if all zero) and q =
// e4m3(x / scale) rounded to nearest, ties to even. The error per element is
// at most max(|x| * 2^-4, scale * 2^-10) (half an e4m3 step).
//
// int4 grouped (KIVI-style, asymmetric): x [heads, rows, channels] is cut
// into groups of up to kInt4GroupSize consecutive elements along one axis:
// kRows (per channel, along the rows: the store's keys, whose outliers sit in
// fixed channels) or kChannels (per row, along the channels: the values).
// Each group gets lo = its minimum rounded down to f16 and step = (max -
// lo) / 15 rounded up to f16 (0 when max == lo), q = clamp(round((x - lo) /
// step), 0, 15), decoded as lo + q * step: |error| <= step / 2 per element
// (up to f32 rounding). Values must be finite with |x| <= 65504.
//
// The dequantizers write f32 `out` views [groups, rows, channels] with unit
// channel stride and any row / group strides (e.g. rows of the fused cache).
#ifndef RAGKV_KERNELS_QUANT_H_
#define RAGKV_KERNELS_QUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

// QuantizeInt8PerChannel: x f32 [groups, rows, channels] contiguous;
// q: [groups*rows*channels] int8; scales: [groups*channels] f32.
absl::Status QuantizeInt8PerChannel(TensorView x, int8_t* q, float* scales);

// DequantizeInt8PerChannel: inverse; q and scales as above (q contiguous),
// out f32 [groups, rows, channels], unit last stride.
absl::Status DequantizeInt8PerChannel(const int8_t* q, const float* scales, TensorView out);

// QuantizeFp8E4M3PerGroup: x f32 [groups, rows, channels] contiguous, every
// element finite (else InvalidArgument); q: [groups*rows*channels] e4m3
// codes; scales: [groups] f32.
absl::Status QuantizeFp8E4M3PerGroup(TensorView x, uint8_t* q, float* scales);

// DequantizeFp8E4M3PerGroup: inverse; out f32 [groups, rows, channels], unit
// last stride.
absl::Status DequantizeFp8E4M3PerGroup(const uint8_t* q, const float* scales, TensorView out);

constexpr int kInt4GroupSize = 32;
enum class Int4Axis { kRows = 0, kChannels = 1 };

// Int4ParamCount: the (step, lo) pairs of a [heads, rows, channels] tensor.
int64_t Int4ParamCount(int64_t heads, int64_t rows, int64_t channels, Int4Axis axis);

// QuantizeInt4Grouped: x f32 [heads, rows, channels] contiguous; codes:
// ceil(numel / 2) bytes, element e (row-major) in the low nibble of byte
// e / 2 when e is even, else the high one (an odd count's last high nibble
// is 0); params: 2 * Int4ParamCount f16 bit patterns, (step, lo) per group,
// groups in order (kRows: [head][row group][channel]; kChannels:
// [head][row][channel group]). InvalidArgument for a value the codec cannot
// represent (non-finite, |x| > 65504).
absl::Status QuantizeInt4Grouped(TensorView x, Int4Axis axis, uint8_t* codes, uint16_t* params);

// DequantizeInt4Grouped: inverse; out f32 [heads, rows, channels], unit last
// stride (any row / head strides).
absl::Status DequantizeInt4Grouped(const uint8_t* codes, const uint16_t* params, Int4Axis axis,
                                   TensorView out);

// Fp8E4M3ToFloat / FloatToFp8E4M3: one value (x finite; |x| > 448
// saturates to +-448). Exposed for tests and tools.
float Fp8E4M3ToFloat(uint8_t code);
uint8_t FloatToFp8E4M3(float x);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_QUANT_H_
