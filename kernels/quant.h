// quant.h: 8-bit quantization of KV tensors (the store's int8 and fp8
// codecs, docs/kv_format.md).
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

// Fp8E4M3ToFloat / FloatToFp8E4M3: one value (x finite; |x| > 448
// saturates to +-448). Exposed for tests and tools.
float Fp8E4M3ToFloat(uint8_t code);
uint8_t FloatToFp8E4M3(float x);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_QUANT_H_
