#include "kernels/cuda/rope.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/internal/checks.h"
#include "kernels/cuda/internal/cuda_status.h"
#include "kernels/cuda/internal/launch.h"

namespace ragkv::kernels::cuda {

absl::Status RerotateKeysByChunk(TensorView k, const int32_t* chunk_offsets,
                                 const int32_t* deltas, int num_chunks,
                                 const RopeParams& params, CudaStream stream) {
  using internal::AlignedTo;
  if (auto s = internal::CheckKvView(k, "RerotateKeysByChunk k"); !s.ok()) return s;
  const int hd = params.head_dim;
  if (hd <= 0 || hd % 2 != 0 || hd > 512 || k.shape[2] != hd) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RerotateKeysByChunk: head_dim ", hd, " must be even, <= 512 and match ", k.DebugString()));
  }
  if (params.layout == RopeLayout::kHalfSplit && (hd / 2) % 2 != 0) {
    return absl::InvalidArgumentError("RerotateKeysByChunk: kHalfSplit needs head_dim % 4 == 0");
  }
  if (params.freq_factors != nullptr || params.freq_scale != 1.0f) {
    return absl::UnimplementedError(
        "RerotateKeysByChunk: RoPE frequency factors / linear scaling are not supported on CUDA "
        "yet (use the CPU kernels::RerotateKeys)");
  }
  if (!(params.theta > 1.0f) || std::isinf(params.theta)) {
    return absl::InvalidArgumentError("RerotateKeysByChunk: theta must be finite and > 1");
  }
  if (num_chunks < 1 || chunk_offsets == nullptr || deltas == nullptr) {
    return absl::InvalidArgumentError(
        "RerotateKeysByChunk: need num_chunks >= 1 and non-null chunk_offsets/deltas");
  }
  if (k.shape[1] > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("RerotateKeysByChunk: more than 2^31-1 tokens");
  }
  if (k.numel() == 0) return absl::OkStatus();

  const int es = static_cast<int>(DTypeSize(k.dtype));
  const int wide = 16 / es;
  const bool half_split = params.layout == RopeLayout::kHalfSplit;
  const int span = half_split ? hd / 2 : hd;
  int vec = 0;
  if (AlignedTo(k.data, 16) && internal::StridesMultipleOf(k, wide) && span % wide == 0) {
    vec = wide;
  } else if (AlignedTo(k.data, 2 * es) && internal::StridesMultipleOf(k, 2)) {
    vec = 2;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "RerotateKeysByChunk: data must be aligned to a pair of elements and strides even, got ",
        k.DebugString()));
  }

  internal::RerotateLaunch a;
  a.data = k.data;
  a.elem = internal::ElemCode(k.dtype);
  a.heads = k.shape[0];
  a.tokens = k.shape[1];
  a.head_dim = hd;
  a.stride_head = k.stride[0];
  a.stride_token = k.stride[1];
  a.chunk_offsets = chunk_offsets;
  a.deltas = deltas;
  a.num_chunks = num_chunks;
  a.theta = params.theta;
  a.half_split = half_split;
  a.vec_elems = vec;
  RAGKV_CUDA_RETURN_IF_ERROR(internal::LaunchRerotate(a, stream), "RerotateKeysByChunk launch");
  return absl::OkStatus();
}

}  // namespace ragkv::kernels::cuda
