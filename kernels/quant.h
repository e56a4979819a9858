// quant.h: int8 per-channel symmetric quantization of KV tensors.
//
// For x: [groups, rows, channels] (for KV: [kv_heads, tokens, head_dim]) each
// (group, channel) column gets scale = max_rows |x| / 127 (1 if the column is
// all zero) and q = round(x / scale) clamped to [-127, 127]. The absolute
// error per element is at most scale / 2.
#ifndef RAGKV_KERNELS_QUANT_H_
#define RAGKV_KERNELS_QUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

// QuantizeInt8PerChannel: x f32 [groups, rows, channels] contiguous;
// q: [groups*rows*channels] int8; scales: [groups*channels] f32.
absl::Status QuantizeInt8PerChannel(TensorView x, int8_t* q, float* scales);

// DequantizeInt8PerChannel: inverse; out f32 [groups, rows, channels] contiguous.
absl::Status DequantizeInt8PerChannel(const int8_t* q, const float* scales, TensorView out);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_QUANT_H_
