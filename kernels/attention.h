// attention.h: selective causal attention with grouped-query heads.
//
// A set of query rows, each with its own absolute position, attends to a KV of
// kv_len tokens stored at positions 0..kv_len-1. With the exact causal mask a
// row at position i sees keys 0..i only, so scattered rows (CacheBlend's
// selective recompute), a full prefill (all rows) and a decode step (one row)
// are the same call. Flash-style: keys are processed in tiles with an online
// softmax, so memory stays O(rows * head_dim); no allocation inside.
#ifndef RAGKV_KERNELS_ATTENTION_H_
#define RAGKV_KERNELS_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

enum class CausalMode {
  // Row at position p sees keys 0..p. The correct mask.
  kExact = 0,
  // The shortcut of the public CacheBlend implementations: the R selected
  // rows are treated as the last R rows of the sequence, so row r (0-based,
  // in the order given) sees keys 0..kv_len-R+r. Lets scattered rows see future
  // tokens; offered only so its error can be measured (docs/design.md §4.5).
  kBottomRight = 1,
};

struct AttentionParams {
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // divides num_heads (GQA group = num_heads/num_kv_heads)
  int head_dim = 0;
  float scale = 0.0f;    // logit scale; 0 means 1/sqrt(head_dim)
  CausalMode causal = CausalMode::kExact;
  // Optional additive bias [rows, kv_len] (row stride = kv_len) added to the
  // logits before softmax, e.g. -inf for block-sparse patterns. May be null.
  const float* additive_mask = nullptr;
  // Sliding window (Gemma 3's SWA layers, llama.cpp's LLAMA_SWA_TYPE_STANDARD):
  // 0 = none; w > 0: a row whose last visible key is p (its position under
  // kExact) sees keys max(0, p - w + 1) .. p only (w keys, itself included).
  // Whole key tiles below every row's window are skipped; keys below a
  // row's window inside a tile it partly sees are read with weight 0, so
  // they must hold finite values (as written cache rows do).
  int window = 0;
};

// SelectiveAttention:
//   q:   f32 [rows, num_heads, head_dim]   (unit stride in last dim)
//   positions: [rows], each in [0, kv_len)   (absolute position of each row)
//   k,v: f32 [num_kv_heads, kv_len, head_dim] (cache layout, unit last stride)
//   out: f32 [rows, num_heads, head_dim]
// out[r,h,:] = softmax_j(scale * q[r,h,:].k[h/g,j,:] + mask) . v[h/g,j,:],
// j over the keys visible to row r. Errors: InvalidArgument on shape/dtype
// mismatch, null views, positions out of range.
absl::Status SelectiveAttention(TensorView q, const int32_t* positions, TensorView k, TensorView v,
                                TensorView out, const AttentionParams& params);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_ATTENTION_H_
