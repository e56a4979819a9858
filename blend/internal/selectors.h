// selectors.h: scores that rank a check layer's candidate rows for
// recompute (BlendOptions::selector; docs/blend.md "Recompute selectors").
// The KV-deviation score lives in blender.cc (it needs the probe); these are
// the others. Higher score = recomputed first; kernels::TopK breaks ties to
// the lower position.
#ifndef RAGKV_BLEND_INTERNAL_SELECTORS_H_
#define RAGKV_BLEND_INTERNAL_SELECTORS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/tensor.h"

namespace ragkv::blend {
class RecomputeBudget;
}  // namespace ragkv::blend

namespace ragkv::blend::internal {

// ChunkHeadScores (EPIC): score[i] = -(offset of cand_pos[i] inside its
// segment), so the first rows of every chunk come first. seg_offset: the
// segments' first positions, ascending.
void ChunkHeadScores(absl::Span<const int32_t> cand_pos, absl::Span<const int64_t> seg_offset,
                     float* score);

// KeyPlane: one layer's keys, f32 [kv_heads][...][head_dim] with head stride.
struct KeyPlane {
  const float* data;
  int64_t head_stride;
  int64_t head_dim;
  int kv_heads;
};

// LayerAttention: how the keys' layer attends: the logit scale (0:
// 1/sqrt(head_dim); ModelConfig::attn_scale) and the sliding window (0:
// none; a query at p sees keys p - window + 1 .. p; ModelConfig::Window).
struct LayerAttention {
  float scale = 0;
  int window = 0;
};

// QueryAttentionScores: attention mass that the query rows put on each
// candidate: for every query row r (queries q: f32 [nq, n_heads*head_dim],
// post-RoPE, at positions q_pos[r], nq = q_pos.size()) and head, softmax
// over the context keys 0..n_context-1 of `keys` that the layer's rule lets
// it see (head h reads kv head h / (n_heads / kv_heads)); a row that sees
// none of them adds nothing. score[i] = the mass on cand_pos[i] summed over
// rows and heads. One GEMM per kv head (kernels::Gemm, kernels::Softmax).
// Errors of the kernels pass through.
absl::Status QueryAttentionScores(const float* q, absl::Span<const int32_t> q_pos, int n_heads,
                                  const KeyPlane& keys, LayerAttention rule, int64_t n_context,
                                  absl::Span<const int32_t> cand_pos, float* score);

// AddMeanNormalized: acc[i] = acc[i] / mean(acc) + x[i] / mean(x) (a mean of
// 0 counts as 1), so two scores of different scales weigh alike.
void AddMeanNormalized(const float* x, int64_t n, float* acc);

// MultiplyBy: acc[i] *= x[i] (the deviation weighted by the query's
// attention on the row: how much the row's error moves what the query reads).
void MultiplyBy(const float* x, int64_t n, float* acc);

// RelativeDeviation: out[i] = |fk_i - ck_i|^2 / mean_j |ck_j|^2 + |fv_i -
// cv_i|^2 / mean_j |cv_j|^2 (a mean of 0 counts as 1): the candidate's
// squared K and V error relative to the cached rows' mean squared norm, a
// unit free of the model's scale. Views: f32 [kv_heads, n, head_dim], unit
// last stride, all of one shape; out: [n]. Errors of the kernels pass through.
absl::Status RelativeDeviation(kernels::TensorView fk, kernels::TensorView ck,
                               kernels::TensorView fv, kernels::TensorView cv, float* out);

// MassCount: the fewest rows, taken in descending `score` order (ties: the
// lower index first, as TopK), whose positive `err` covers `mass` of the
// total (the adaptive ratio's mass rule, BlendOptions::adaptive_mass).
int64_t MassCount(const std::vector<float>& score, const std::vector<float>& err, double mass);

// ThresholdCount: how many of err[0..n) are >= threshold x ErrorUnit(err) (the adaptive ratio's
// threshold rule, BlendOptions::adaptive_threshold; docs/blend.md "Adaptive ratio").
int64_t ThresholdCount(const float* err, int64_t n, double threshold);

// AdaptiveRule: the adaptive ratio's parameters (BlendOptions'
// recompute_budget, adaptive_threshold, adaptive_mass, adaptive_min, ratio).
struct AdaptiveRule {
  RecomputeBudget* budget = nullptr;
  double threshold = 0, mass = 0, r_min = 0, r_max = 1;
};

// AdaptiveCount: the rows the adaptive ratio keeps of err.size()
// candidates, by the first rule `o` sets: the budget rule (o.budget, which
// records the request), the threshold rule, the mass rule over `score`'s
// order.
int64_t AdaptiveCount(const AdaptiveRule& o, const std::vector<float>& score,
                      const std::vector<float>& err, int64_t selectable);

}  // namespace ragkv::blend::internal

#endif  // RAGKV_BLEND_INTERNAL_SELECTORS_H_
