// elementwise.h: RMSNorm, SwiGLU, ggml's GeGLU and softmax over rows of f32 matrices.
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

// GeGluGgml: out = gelu(gate) * up as ggml's CPU backend computes it
// (ggml_vec_geglu_f32 with GGML_GELU_FP16, which the pinned ggml defines
// unconditionally): gate <= -10 -> 0; gate >= 10 -> gate * up; otherwise
// gate rounded to f16 (nearest even) indexes a table of
// f16(gelu_tanh(f16 value)), widened, times up. gelu_tanh(x) = 0.5x(1 +
// tanhf(sqrt(2/pi) x (1 + 0.044715 x^2))) in f32. Gemma 3's FFN
// (docs/gemma3.md). Shapes as SwiGlu.
absl::Status GeGluGgml(TensorView gate, TensorView up, TensorView out);
// GeluGgmlScalar: the activation GeGluGgml applies to one gate value
// (its table lookup), for tests.
float GeluGgmlScalar(float x);

// Softmax: numerically stable softmax of each row of x, in place. f32 [rows, n].
absl::Status Softmax(TensorView x);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_ELEMENTWISE_H_
