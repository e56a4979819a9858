// attention.h (cuda): selective causal attention with GQA on the GPU, varlen
// over a batch of requests, with a plan/run split in the FlashInfer manner.
//
// A batch holds B requests. Request b has query rows
// [q_indptr[b], q_indptr[b+1]) of q and keys [kv_indptr[b], kv_indptr[b+1])
// of the token dim of K/V; row i of request b sits at request-local position
// positions[i] and (CausalMode::kExact) sees that request's keys
// 0..positions[i] exactly, so CacheBlend's scattered recompute rows, a full
// prefill and a decode step are the same call. CPU twin:
// kernels::SelectiveAttention (kernels/attention.h), request by request.
//
// Usage (an engine): once per batch shape, Create() a plan on the host
// (q_indptr / kv_indptr are HOST arrays), size a device workspace with
// workspace_bytes(), Upload() the plan into it; then Run() for every layer
// with that layer's tensors. Run() never allocates and never synchronizes.
//
// Numerics: f16/bf16 inputs, f32 logits, f32 online softmax (base-2 exponent,
// scale folded in), f32 accumulation, output rounded once to the input type.
// Tensor-core path (f16/bf16, head_dim 64 or 128, 16-byte aligned views):
// P is rounded to the input type before P.V (as FlashAttention does). SIMT
// path: any float dtype (f32 too), head_dim <= 256, all f32 arithmetic.
// Conventions (device views, stream, errors, thread safety): device.h.
#ifndef RAGKV_KERNELS_CUDA_ATTENTION_H_
#define RAGKV_KERNELS_CUDA_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/attention.h"
#include "kernels/cuda/device.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::cuda {

enum class AttentionAlgo {
  kAuto = 0,        // tensor cores when the shape/dtype/alignment allow, else SIMT
  kTensorCore = 1,  // mma.sync flash kernel; InvalidArgument when not applicable
  kSimt = 2,        // f32 CUDA-core reference kernel
};

struct AttentionConfig {
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // divides num_heads
  int head_dim = 0;      // 64/128 for tensor cores; <= 256 for SIMT
  DType dtype = DType::kF16;  // of q, k, v and out
  float scale = 0.0f;         // logit scale; 0 means 1/sqrt(head_dim)
  CausalMode causal = CausalMode::kExact;  // kBottomRight only to measure its error
  AttentionAlgo algo = AttentionAlgo::kAuto;
  // Query vectors per work item (CTA): 0 = the plan picks (128 unless that
  // gives fewer than ~384 CTAs, then 64); 64 or 128 forces it (tests, tuning).
  int tile_vectors = 0;
};

// SelectiveAttentionArgs: one layer's device tensors for a planned batch.
struct SelectiveAttentionArgs {
  TensorView q;    // [total_rows, num_heads, head_dim], unit last stride
  const int32_t* positions = nullptr;  // device int32 [total_rows]; kExact only.
                  // Values >= the request's kv_len are clamped to kv_len-1; a
                  // negative value gives a zero output row and LSE -inf.
  TensorView k;    // [num_kv_heads, total_kv, head_dim], unit last stride
  TensorView v;    // [num_kv_heads, total_kv, head_dim], unit last stride
  TensorView out;  // [total_rows, num_heads, head_dim], dtype of q
  float* lse = nullptr;  // optional device f32 [total_rows, num_heads]:
                         // natural-log log-sum-exp of the scaled logits
                         // (for merging partial attention, FlashInfer's MergeState)
};

// SelectiveAttentionPlan: host-side work decomposition for one batch shape.
// A value type (copyable); const methods are thread-safe.
class SelectiveAttentionPlan {
 public:
  // Create: q_indptr, kv_indptr: HOST int32 [B + 1], non-decreasing, from 0;
  // totals < 2^31. Errors: InvalidArgument for bad config or indptrs.
  static absl::StatusOr<SelectiveAttentionPlan> Create(const AttentionConfig& config,
                                                       std::span<const int32_t> q_indptr,
                                                       std::span<const int32_t> kv_indptr);

  // workspace_bytes: device bytes Upload/Run need (may be 0 for an empty batch).
  size_t workspace_bytes() const { return items_.size() * sizeof(int32_t); }

  // Upload: enqueues the copy of the plan into `workspace` (device, >=
  // workspace_bytes(), 16-byte aligned) on `stream`. The copy reads this
  // plan's host memory, so keep the plan alive and unchanged until `stream`
  // has passed this point (e.g. synchronize once after planning).
  absl::Status Upload(void* workspace, size_t workspace_bytes, CudaStream stream) const;

  // Run: enqueues attention for `args` on `stream`, reading the work list
  // that Upload() put into `workspace`. Errors: InvalidArgument when the
  // tensors do not match the plan's config and totals (or kTensorCore was
  // forced on an unsupported shape/alignment).
  absl::Status Run(const SelectiveAttentionArgs& args, const void* workspace,
                   size_t workspace_bytes, CudaStream stream) const;

  const AttentionConfig& config() const { return config_; }
  int64_t total_rows() const { return total_rows_; }
  int64_t total_kv() const { return total_kv_; }
  // num_work_items: CTAs per kv head (tiles of tile_vectors() query vectors).
  int num_work_items() const { return static_cast<int>(items_.size() / 8); }
  // tile_vectors: query vectors per work item, 128 or 64 (config's, or
  // Create's pick: 128 unless that gives fewer than ~384 CTAs = items x kv heads).
  int tile_vectors() const { return tile_vectors_; }

 private:
  SelectiveAttentionPlan() = default;
  AttentionConfig config_;
  int64_t total_rows_ = 0;
  int64_t total_kv_ = 0;
  int tile_vectors_ = 64;
  std::vector<int32_t> items_;  // internal::AttnWorkItem records, 8 int32 each
};

}  // namespace ragkv::kernels::cuda

#endif  // RAGKV_KERNELS_CUDA_ATTENTION_H_
