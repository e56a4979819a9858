// elementwise.h: RMSNorm, SwiGLU and softmax over rows of f32 matrices.
#ifndef RAGKV_KERNELS_ELEMENTWISE_H_
#define RAGKV_KERNELS_ELEMENTWISE_H_

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

// RmsNorm: out[r,:] = x[r,:] / sqrt(mean(x[r,:]^2) + eps) * weight[:].
//   x, out: f32 [rows, dim] (unit column stride; out may alias x);
//   weight: f32 [dim].
absl::Status RmsNorm(TensorView x, TensorView weight, float eps, TensorView out);

// SwiGlu: out = silu(gate) * up, silu(z) = z / (1 + exp(-z)).
//   gate, up, out: f32 [rows, ffn] (out may alias gate or up).
absl::Status SwiGlu(TensorView gate, TensorView up, TensorView out);

// Softmax: numerically stable softmax of each row of x, in place. f32 [rows, n].
absl::Status Softmax(TensorView x);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_ELEMENTWISE_H_
