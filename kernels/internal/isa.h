// isa.h (internal): the per-instruction-set kernel table behind the public
// entry points. Each of isa_baseline.cc / isa_avx2.cc / isa_avx512.cc compiles
// isa_impl.inc with its own flags into its own namespace and exports one
// IsaTable. The functions here do no validation: the public entry points in
// kernels/*.cc check shapes first. All functions are thread-safe (pure).
#ifndef RAGKV_KERNELS_INTERNAL_ISA_H_
#define RAGKV_KERNELS_INTERNAL_ISA_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu.h"

namespace ragkv::kernels::internal {

// Key tile of the attention kernel.
inline constexpr int kAttnKeyTile = 64;

// AttnTask: one (kv head, tile of query rows) unit of SelectiveAttention. The
// group's query heads of every row in the tile are processed together against
// one K/V head, so each K tile is packed once for group*nrows query vectors.
struct AttnTask {
  const float* q = nullptr;  // q[row * q_row_stride + head * q_head_stride + d]
  int64_t q_row_stride = 0, q_head_stride = 0;
  const float* k = nullptr;  // k[kv_head * k_head_stride + t * k_tok_stride + d]
  int64_t k_head_stride = 0, k_tok_stride = 0;
  const float* v = nullptr;
  int64_t v_head_stride = 0, v_tok_stride = 0;
  float* out = nullptr;  // same indexing as q
  int64_t out_row_stride = 0, out_head_stride = 0;
  int group = 1;  // query heads per kv head
  int head_dim = 0;
  float scale = 1.0f;
  int kv_head = 0;
  // rows[i]: original row index; limits[i]: last visible key (>= 0), sorted
  // ascending over i.
  const int32_t* rows = nullptr;
  const int32_t* limits = nullptr;
  int nrows = 0;
  const float* additive_mask = nullptr;  // [row][key], row stride mask_stride
  int64_t mask_stride = 0;
  // Sliding window: 0 = none; w > 0: the vector whose limit is p sees keys
  // p - w + 1 .. p only (AttentionParams::window).
  int32_t window = 0;
  float* workspace = nullptr;  // AttnWorkspaceFloats(group * nrows, head_dim)
  // Key range [key_begin, key_end) of this task (key_begin a multiple of
  // kAttnKeyTile); the full range unless keys are split across tasks.
  int64_t key_begin = 0;
  int64_t key_end = INT64_MAX;
  // If partial_o is set, the task writes its unnormalized state instead of
  // `out`: partial_o [M][head_dim] = sum_j e^(s_j - m) v_j, partial_m [M] = m
  // (running max, -inf if no key was visible), partial_l [M] = sum_j
  // e^(s_j - m), with M = group * nrows in (row, head) order.
  float* partial_o = nullptr;
  float* partial_m = nullptr;
  float* partial_l = nullptr;
};

// Query vectors of a task are padded to a multiple of this (>= every ISA's
// 2*vector width).
inline constexpr int kAttnQPad = 32;

// AttnWorkspaceFloats: scratch floats one AttentionTask needs for m query
// vectors of head_dim (Q^T, O accumulators, S^T tile, m/l/alpha/limits/PV
// block extents, and a row-major Q for tasks of at most 4 query vectors).
inline size_t AttnWorkspaceFloats(int64_t m, int64_t head_dim) {
  const int64_t mp = (m + kAttnQPad - 1) / kAttnQPad * kAttnQPad;
  return static_cast<size_t>(head_dim * mp + m * head_dim + kAttnKeyTile * mp + 5 * mp + 64 +
                             // row-major Q copy of the few-vector (decode) path
                             4 * head_dim);
}

struct IsaTable {
  Isa isa;
  void (*attention_task)(const AttnTask& task);
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n);
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  // rope_*: rotate n_vec vectors of head_dim (vector i at x + i * vec_stride)
  // by the angles whose cos/sin are cos_t/sin_t [head_dim/2].
  void (*rope_f32)(float* x, int64_t n_vec, int64_t vec_stride, const float* cos_t,
                   const float* sin_t, int head_dim, bool half_split);
  void (*rope_f16)(uint16_t* x, int64_t n_vec, int64_t vec_stride, const float* cos_t,
                   const float* sin_t, int head_dim, bool half_split);
  void (*rope_bf16)(uint16_t* x, int64_t n_vec, int64_t vec_stride, const float* cos_t,
                    const float* sin_t, int head_dim, bool half_split);
  float (*sq_diff_sum)(const float* a, const float* b, int64_t n);
  void (*rmsnorm_row)(const float* x, const float* w, float eps, float* out, int64_t n);
  void (*swiglu_row)(const float* gate, const float* up, float* out, int64_t n);
  void (*softmax_row)(float* x, int64_t n);
  // absmax_accum: m[i] = max(m[i], |x[i]|).
  void (*absmax_accum)(const float* x, float* m, int64_t n);
  // quant_row: q[i] = clamp(round(x[i] / scale[i]), -127, 127).
  void (*quant_row)(const float* x, const float* scale, int8_t* q, int64_t n);
  // dequant_row: out[i] = q[i] * scale[i].
  void (*dequant_row)(const int8_t* q, const float* scale, float* out, int64_t n);
  // dot: sum a[i] * b[i].
  float (*dot)(const float* a, const float* b, int64_t n);
  // dequant_q8_0 / dequant_q4_k: n ggml blocks to floats, bit-identical to
  // ggml's to_float (kernels/ggml_quant.h has the layouts).
  void (*dequant_q8_0)(const uint8_t* src, float* dst, int64_t n_blocks);
  void (*dequant_q4_k)(const uint8_t* src, float* dst, int64_t n_blocks);
};

const IsaTable& BaselineTable();
const IsaTable& Avx2Table();
const IsaTable& Avx512Table();
// ActiveTable: the table for ActiveIsa() (isa.cc).
const IsaTable& ActiveTable();

// Scalar IEEE conversions (round to nearest even; NaN stays NaN, quieted).
uint16_t FloatToHalfBits(float f);
float HalfBitsToFloat(uint16_t h);
uint16_t FloatToBf16Bits(float f);
float Bf16BitsToFloat(uint16_t b);

}  // namespace ragkv::kernels::internal

#endif  // RAGKV_KERNELS_INTERNAL_ISA_H_
