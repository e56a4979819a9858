// convert.h: fp16 / bf16 <-> fp32 conversion (scalar helpers and bulk kernels).
#ifndef RAGKV_KERNELS_CONVERT_H_
#define RAGKV_KERNELS_CONVERT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

// Scalar conversions, IEEE round-to-nearest-even; NaN/Inf preserved.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t b);

// Convert: dst = src element-wise, any pair of {f32, f16, bf16} (same dtype
// is a copy). Both views contiguous with equal numel. F16C / AVX-512 paths
// where the CPU has them; OpenMP over MaxThreads() for large sizes.
absl::Status Convert(TensorView src, TensorView dst);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_CONVERT_H_
