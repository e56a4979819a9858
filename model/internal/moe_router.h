// moe_router.h: the mixture-of-experts router of the runtime, as the pinned
// llama.cpp's build_moe_ffn computes it for qwen3moe and Mixtral (softmax
// gating, top-k, the k weights renormalised). Private to model/; tested
// against a naive loop in tests/model/moe_test.cc.
#ifndef RAGKV_MODEL_INTERNAL_MOE_ROUTER_H_
#define RAGKV_MODEL_INTERNAL_MOE_ROUTER_H_

#include <cstdint>

namespace ragkv::model::internal {

// kMoeWeightSumFloor: llama.cpp clamps the sum of the k selected
// probabilities to at least this (the smallest normal f16) before dividing.
inline constexpr float kMoeWeightSumFloor = 6.103515625e-5f;

// RouteTopK: for each of `rows` rows of router logits (f32 [rows,
// n_experts], row-major):
//   probs[r, :]   = softmax(logits[r, :]) (max-subtracted exp in f32, sum in
//                   double, times the f32 reciprocal: ggml_soft_max's order);
//   experts[r, i] = the i-th most probable expert, i < k; equal
//                   probabilities go to the lower expert index;
//   weights[r, i] = probs[r, experts[r, i]] / max(sum of those k, floor).
// probs may alias logits. Requires 1 <= k <= n_experts.
void RouteTopK(const float* logits, int64_t rows, int n_experts, int k, float* probs,
               int32_t* experts, float* weights);

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_MOE_ROUTER_H_
