#include "kernels/cuda/attention.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/internal/checks.h"
#include "kernels/cuda/internal/cuda_status.h"
#include "kernels/cuda/internal/launch.h"

namespace ragkv::kernels::cuda {
namespace {

using internal::AttnWorkItem;

absl::Status CheckIndptr(std::span<const int32_t> p, const char* name) {
  if (p.size() < 2) return absl::InvalidArgumentError(absl::StrCat(name, ": need B+1 >= 2 entries"));
  if (p[0] != 0) return absl::InvalidArgumentError(absl::StrCat(name, "[0] must be 0"));
  for (size_t i = 1; i < p.size(); ++i) {
    if (p[i] < p[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be non-decreasing"));
    }
  }
  return absl::OkStatus();
}

bool TensorCoreShape(const AttentionConfig& c) {
  return (c.dtype == DType::kF16 || c.dtype == DType::kBF16) &&
         (c.head_dim == 64 || c.head_dim == 128);
}

// 16-byte vector access is legal for every row the tensor-core kernel touches.
bool TensorCoreAligned(const SelectiveAttentionArgs& a) {
  for (const TensorView* t : {&a.q, &a.k, &a.v, &a.out}) {
    if (!internal::AlignedTo(t->data, 16) || !internal::StridesMultipleOf(*t, 8)) return false;
  }
  return true;
}

absl::Status CheckShape(const TensorView& t, const char* name, DType dtype, int64_t d0, int64_t d1,
                        int64_t d2) {
  if (auto s = internal::CheckKvView(t, name); !s.ok()) return s;
  if (t.dtype != dtype || t.shape[0] != d0 || t.shape[1] != d1 || t.shape[2] != d2) {
    return absl::InvalidArgumentError(absl::StrCat("SelectiveAttention ", name, ": got ",
                                                   t.DebugString(), ", plan wants ",
                                                   DTypeName(dtype), "[", d0, ",", d1, ",", d2,
                                                   "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SelectiveAttentionPlan> SelectiveAttentionPlan::Create(
    const AttentionConfig& config, std::span<const int32_t> q_indptr,
    std::span<const int32_t> kv_indptr) {
  const AttentionConfig& c = config;
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("SelectiveAttentionPlan: num_kv_heads ",
                                                   c.num_kv_heads, " must divide num_heads ",
                                                   c.num_heads));
  }
  if (c.num_kv_heads > 65535) {
    return absl::InvalidArgumentError("SelectiveAttentionPlan: more than 65535 kv heads");
  }
  if (c.head_dim <= 0 || c.head_dim > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("SelectiveAttentionPlan: head_dim ", c.head_dim, " not in 1..256"));
  }
  if (!internal::IsFloatType(c.dtype)) {
    return absl::InvalidArgumentError("SelectiveAttentionPlan: dtype must be f32/f16/bf16");
  }
  if (c.algo == AttentionAlgo::kTensorCore && !TensorCoreShape(c)) {
    return absl::InvalidArgumentError(
        "SelectiveAttentionPlan: tensor cores need f16/bf16 and head_dim 64 or 128");
  }
  if (!(c.scale >= 0.0f) || std::isinf(c.scale)) {
    return absl::InvalidArgumentError("SelectiveAttentionPlan: scale must be finite and >= 0");
  }
  if (c.tile_vectors != 0 && c.tile_vectors != internal::kAttnTileVectorsSmall &&
      c.tile_vectors != internal::kAttnTileVectorsLarge) {
    return absl::InvalidArgumentError(absl::StrCat("SelectiveAttentionPlan: tile_vectors ",
                                                   c.tile_vectors, " not in {0, 64, 128}"));
  }
  if (auto s = CheckIndptr(q_indptr, "q_indptr"); !s.ok()) return s;
  if (auto s = CheckIndptr(kv_indptr, "kv_indptr"); !s.ok()) return s;
  if (q_indptr.size() != kv_indptr.size()) {
    return absl::InvalidArgumentError("SelectiveAttentionPlan: q_indptr and kv_indptr sizes differ");
  }

  SelectiveAttentionPlan plan;
  plan.config_ = c;
  if (plan.config_.scale == 0.0f) plan.config_.scale = 1.0f / std::sqrt(float(c.head_dim));
  plan.total_rows_ = q_indptr.back();
  plan.total_kv_ = kv_indptr.back();
  const int64_t group = c.num_heads / c.num_kv_heads;

  struct Req {
    int32_t b;
    int32_t kv_len;
  };
  std::vector<Req> reqs;
  for (size_t b = 0; b + 1 < q_indptr.size(); ++b) {
    const int32_t rows = q_indptr[b + 1] - q_indptr[b];
    const int32_t kv_len = kv_indptr[b + 1] - kv_indptr[b];
    if (rows == 0) continue;
    if (kv_len == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SelectiveAttentionPlan: request ", b, " has query rows but no keys"));
    }
    if (rows * group > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError("SelectiveAttentionPlan: too many query vectors");
    }
    reqs.push_back({static_cast<int32_t>(b), kv_len});
  }
  // Tile size: the large tile (more query vectors per K/V tile read) unless
  // that leaves too few CTAs to fill the GPU.
  int64_t large_tiles = 0;
  for (const Req& r : reqs) {
    const int64_t vecs = int64_t{q_indptr[r.b + 1] - q_indptr[r.b]} * group;
    large_tiles += (vecs + internal::kAttnTileVectorsLarge - 1) / internal::kAttnTileVectorsLarge;
  }
  const int tile = c.tile_vectors != 0 ? c.tile_vectors
                   : large_tiles * c.num_kv_heads >= internal::kAttnLargeTileMinCtas
                       ? internal::kAttnTileVectorsLarge
                       : internal::kAttnTileVectorsSmall;
  plan.tile_vectors_ = tile;
  // Longest KV first: the heaviest tiles start first (LPT scheduling).
  // Within a request the last tile goes first: rows are usually in position
  // order (a prefill, CacheBlend's sorted recompute rows, kBottomRight), so
  // the last tile sees the most keys.
  std::stable_sort(reqs.begin(), reqs.end(),
                   [](const Req& x, const Req& y) { return x.kv_len > y.kv_len; });
  for (const Req& r : reqs) {
    const int32_t rows = q_indptr[r.b + 1] - q_indptr[r.b];
    const int64_t vecs = rows * group;
    const int64_t last = (vecs - 1) / tile * tile;
    for (int64_t v0 = last; v0 >= 0; v0 -= tile) {
      AttnWorkItem w{};
      w.row_begin = q_indptr[r.b];
      w.num_rows = rows;
      w.vec_begin = static_cast<int32_t>(v0);
      w.vec_count = static_cast<int32_t>(std::min<int64_t>(tile, vecs - v0));
      w.kv_begin = kv_indptr[r.b];
      w.kv_len = r.kv_len;
      const size_t at = plan.items_.size();
      plan.items_.resize(at + 8);
      std::memcpy(plan.items_.data() + at, &w, sizeof(w));
    }
  }
  if (plan.items_.size() / 8 > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError("SelectiveAttentionPlan: too many work items");
  }
  return plan;
}

absl::Status SelectiveAttentionPlan::Upload(void* workspace, size_t workspace_bytes,
                                            CudaStream stream) const {
  if (items_.empty()) return absl::OkStatus();
  if (workspace == nullptr || workspace_bytes < this->workspace_bytes() ||
      !internal::AlignedTo(workspace, 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SelectiveAttentionPlan::Upload: need a 16-byte aligned workspace of ",
        this->workspace_bytes(), " bytes, got ", workspace_bytes));
  }
  RAGKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(workspace, items_.data(), this->workspace_bytes(),
                                             cudaMemcpyHostToDevice, stream),
                             "SelectiveAttentionPlan::Upload");
  return absl::OkStatus();
}

absl::Status SelectiveAttentionPlan::Run(const SelectiveAttentionArgs& args,
                                         const void* workspace, size_t workspace_bytes,
                                         CudaStream stream) const {
  const AttentionConfig& c = config_;
  if (auto s = CheckShape(args.q, "q", c.dtype, total_rows_, c.num_heads, c.head_dim); !s.ok())
    return s;
  if (auto s = CheckShape(args.out, "out", c.dtype, total_rows_, c.num_heads, c.head_dim); !s.ok())
    return s;
  if (auto s = CheckShape(args.k, "k", c.dtype, c.num_kv_heads, total_kv_, c.head_dim); !s.ok())
    return s;
  if (auto s = CheckShape(args.v, "v", c.dtype, c.num_kv_heads, total_kv_, c.head_dim); !s.ok())
    return s;
  if (items_.empty()) return absl::OkStatus();
  if (c.causal == CausalMode::kExact && args.positions == nullptr) {
    return absl::InvalidArgumentError("SelectiveAttention: kExact needs positions");
  }
  if (workspace == nullptr || workspace_bytes < this->workspace_bytes()) {
    return absl::InvalidArgumentError("SelectiveAttention: workspace missing or too small");
  }
  bool tensor_core = false;
  if (c.algo != AttentionAlgo::kSimt && TensorCoreShape(c)) {
    tensor_core = TensorCoreAligned(args);
    if (!tensor_core && c.algo == AttentionAlgo::kTensorCore) {
      return absl::InvalidArgumentError(
          "SelectiveAttention: tensor-core path needs 16-byte aligned data and strides that "
          "are multiples of 8 elements");
    }
  }

  internal::AttnLaunch l;
  l.items = static_cast<const AttnWorkItem*>(workspace);
  l.num_items = num_work_items();
  l.q = args.q.data;
  l.q_stride_row = args.q.stride[0];
  l.q_stride_head = args.q.stride[1];
  l.k = args.k.data;
  l.k_stride_head = args.k.stride[0];
  l.k_stride_token = args.k.stride[1];
  l.v = args.v.data;
  l.v_stride_head = args.v.stride[0];
  l.v_stride_token = args.v.stride[1];
  l.out = args.out.data;
  l.o_stride_row = args.out.stride[0];
  l.o_stride_head = args.out.stride[1];
  l.lse = args.lse;
  l.positions = args.positions;
  l.elem = internal::ElemCode(c.dtype);
  l.num_heads = c.num_heads;
  l.num_kv_heads = c.num_kv_heads;
  l.head_dim = c.head_dim;
  l.scale = c.scale;
  l.bottom_right = c.causal == CausalMode::kBottomRight;
  l.tensor_core = tensor_core;
  l.tile_vectors = tile_vectors_;
  RAGKV_CUDA_RETURN_IF_ERROR(internal::LaunchAttention(l, stream), "SelectiveAttention launch");
  return absl::OkStatus();
}

}  // namespace ragkv::kernels::cuda
