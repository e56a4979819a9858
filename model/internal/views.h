// views.h: f32 strided TensorViews over model buffers, shared by the
// forward's pieces (model.cc, gemma_block.cc, moe_ffn.cc). Private to
// model/.
#ifndef RAGKV_MODEL_INTERNAL_VIEWS_H_
#define RAGKV_MODEL_INTERNAL_VIEWS_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace ragkv::model::internal {

// View2D: f32 [rows, cols] over p with row stride ld (unit column stride).
// The view is writable; callers pass const memory only to kernels that read it.
inline kernels::TensorView View2D(const float* p, int64_t rows, int64_t cols, int64_t ld) {
  return kernels::TensorView::Strided(p, kernels::DType::kF32, {rows, cols}, {ld, 1});
}

// View3D: f32 [a, b, c] over p with strides (sa, sb, 1).
inline kernels::TensorView View3D(const float* p, int64_t a, int64_t b, int64_t c, int64_t sa,
                                  int64_t sb) {
  return kernels::TensorView::Strided(p, kernels::DType::kF32, {a, b, c}, {sa, sb, 1});
}

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_VIEWS_H_
