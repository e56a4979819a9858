#include "blend/kv_source.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/convert.h"
#include "kernels/rope.h"

namespace ragkv::blend {

using kernels::DType;
using kernels::TensorView;

namespace {

TensorView LayerView(const ChunkInfo& info, const std::vector<uint8_t>& bytes) {
  return TensorView::Contiguous(static_cast<const void*>(bytes.data()), info.dtype,
                                {info.kv_heads, info.num_tokens, info.head_dim});
}

}  // namespace

TensorView ChunkKV::LayerK(int l) const { return LayerView(info, k[l]); }
TensorView ChunkKV::LayerV(int l) const { return LayerView(info, v[l]); }

absl::Status CopyHeadsToF32(TensorView src, TensorView dst) {
  if (src.rank != 3 || dst.rank != 3 || dst.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyHeadsToF32: want rank-3 src and f32 dst, got ", src.DebugString(),
                     " -> ", dst.DebugString()));
  }
  for (int i = 0; i < 3; ++i) {
    if (src.shape[i] != dst.shape[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CopyHeadsToF32: shape mismatch ", src.DebugString(), " vs ", dst.DebugString()));
    }
  }
  if (!src.IsContiguous() || (dst.shape[2] > 1 && dst.stride[2] != 1) ||
      (dst.shape[1] > 1 && dst.stride[1] != dst.shape[2])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyHeadsToF32: need contiguous src and [heads] strided dst with contiguous rows, got ",
        src.DebugString(), " -> ", dst.DebugString()));
  }
  const int64_t heads = src.shape[0], plane = src.shape[1] * src.shape[2];
  const size_t esize = kernels::DTypeSize(src.dtype);
  for (int64_t h = 0; h < heads; ++h) {
    const uint8_t* s = static_cast<const uint8_t*>(src.data) + h * plane * esize;
    float* d = dst.as<float>() + h * dst.stride[0];
    if (src.dtype == DType::kF32) {
      std::memcpy(d, s, plane * sizeof(float));
    } else {
      RETURN_IF_ERROR(kernels::Convert(TensorView::Contiguous(static_cast<const void*>(s),
                                                              src.dtype, {plane}),
                                       TensorView::Contiguous(static_cast<void*>(d),
                                                              DType::kF32, {plane})));
    }
  }
  return absl::OkStatus();
}

absl::Status InMemoryKvSource::ReadLayer(int layer, TensorView dst_k, TensorView dst_v) {
  const ChunkInfo& info = chunk_->info;
  if (layer < 0 || layer >= info.num_layers || layer >= static_cast<int>(chunk_->k.size()) ||
      layer >= static_cast<int>(chunk_->v.size())) {
    return absl::OutOfRangeError(absl::StrCat("InMemoryKvSource: no layer ", layer));
  }
  const size_t want = static_cast<size_t>(info.kv_heads) * info.num_tokens * info.head_dim *
                      kernels::DTypeSize(info.dtype);
  if (chunk_->k[layer].size() != want || chunk_->v[layer].size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("InMemoryKvSource: layer ", layer, " holds ", chunk_->k[layer].size(), "/",
                     chunk_->v[layer].size(), " bytes, want ", want));
  }
  RETURN_IF_ERROR(CopyHeadsToF32(chunk_->LayerK(layer), dst_k));
  return CopyHeadsToF32(chunk_->LayerV(layer), dst_v);
}

absl::StatusOr<ChunkKV> PrecomputeChunk(const model::Model& model,
                                        absl::Span<const int32_t> tokens, DType dtype) {
  return PrecomputeChunkAfter(model, {}, tokens, dtype);
}

namespace {

// Precompute: the rows of `tokens` in one prefill of context + tokens; keys
// moved back to 0..T-1 when `rerotate`, else left at P..P+T-1.
absl::StatusOr<ChunkKV> Precompute(const model::Model& model, absl::Span<const int32_t> context,
                                   absl::Span<const int32_t> tokens, DType dtype, bool rerotate) {
  if (tokens.empty()) return absl::InvalidArgumentError("PrecomputeChunk: empty chunk");
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrecomputeChunk: unsupported KV dtype ", kernels::DTypeName(dtype)));
  }
  const model::ModelConfig& cfg = model.config();
  const int64_t P = static_cast<int64_t>(context.size());
  const int64_t T = static_cast<int64_t>(tokens.size());
  ASSIGN_OR_RETURN(model::KVCache cache, model.NewCache(P + T));
  model::Workspace ws;
  if (P > 0) RETURN_IF_ERROR(model.Prefill(context, &cache, &ws, model::LogitsMode::kNone, nullptr));
  RETURN_IF_ERROR(model.Prefill(tokens, &cache, &ws, model::LogitsMode::kNone, nullptr));
  ChunkKV out;
  out.info.fingerprint = model.fingerprint();
  out.info.dtype = dtype;
  out.info.num_layers = cfg.n_layers;
  out.info.kv_heads = cfg.n_kv_heads;
  out.info.head_dim = cfg.head_dim;
  out.info.num_tokens = static_cast<int64_t>(tokens.size());
  out.info.first_position = rerotate ? 0 : P;
  out.tokens.assign(tokens.begin(), tokens.end());
  const size_t bytes = static_cast<size_t>(cfg.n_kv_heads) * tokens.size() * cfg.head_dim *
                       kernels::DTypeSize(dtype);
  out.k.resize(cfg.n_layers);
  out.v.resize(cfg.n_layers);
  std::vector<float> k32, v32;
  for (int l = 0; l < cfg.n_layers; ++l) {
    out.k[l].resize(bytes);
    out.v[l].resize(bytes);
    if (P == 0 || !rerotate) {
      RETURN_IF_ERROR(cache.ExportLayer(l, P, T, dtype, out.k[l].data(), out.v[l].data()));
      continue;
    }
    // Export f32, move keys from P..P+T-1 back to 0..T-1, then convert.
    const int64_t n = static_cast<int64_t>(cfg.n_kv_heads) * T * cfg.head_dim;
    k32.resize(n);
    v32.resize(n);
    RETURN_IF_ERROR(cache.ExportLayer(l, P, T, DType::kF32, k32.data(), v32.data()));
    const TensorView kv32 =
        TensorView::Contiguous(k32.data(), DType::kF32, {cfg.n_kv_heads, T, cfg.head_dim});
    // Each layer's own RoPE (gemma3: SWA layers' base, global layers'
    // scaling; docs/gemma3.md section 4 rule 1; Rope() for other archs).
    RETURN_IF_ERROR(kernels::RerotateKeys(kv32, -P, cfg.LayerRope(l)));
    RETURN_IF_ERROR(kernels::Convert(kv32, TensorView::Contiguous(static_cast<void*>(out.k[l].data()),
                                                                  dtype, {n})));
    RETURN_IF_ERROR(kernels::Convert(
        TensorView::Contiguous(v32.data(), DType::kF32, {n}),
        TensorView::Contiguous(static_cast<void*>(out.v[l].data()), dtype, {n})));
  }
  return out;
}

}  // namespace

absl::StatusOr<ChunkKV> PrecomputeChunkAfter(const model::Model& model,
                                             absl::Span<const int32_t> context,
                                             absl::Span<const int32_t> tokens, DType dtype) {
  return Precompute(model, context, tokens, dtype, /*rerotate=*/true);
}

absl::StatusOr<ChunkKV> PrecomputeChunkInContext(const model::Model& model,
                                                 absl::Span<const int32_t> context,
                                                 absl::Span<const int32_t> tokens, DType dtype) {
  if (context.empty()) return absl::InvalidArgumentError("PrecomputeChunkInContext: empty context");
  return Precompute(model, context, tokens, dtype, /*rerotate=*/false);
}

absl::StatusOr<ChunkKV> PrecomputeChunk(const model::Model& model,
                                        absl::Span<const int32_t> tokens) {
  return PrecomputeChunk(model, tokens, model.config().kv_dtype);
}

absl::StatusOr<std::unique_ptr<SliceKvSource>> SliceKvSource::Create(
    std::unique_ptr<KvSource> base, int64_t begin, int64_t end) {
  if (base == nullptr) return absl::InvalidArgumentError("SliceKvSource: no base source");
  const int64_t n = base->info().num_tokens;
  if (begin < 0 || begin >= end || end > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("SliceKvSource: rows [", begin, ", ", end, ") outside a chunk of ", n));
  }
  return std::unique_ptr<SliceKvSource>(new SliceKvSource(std::move(base), begin, end));
}

SliceKvSource::SliceKvSource(std::unique_ptr<KvSource> base, int64_t begin, int64_t end)
    : base_(std::move(base)), begin_(begin), info_(base_->info()) {
  info_.num_tokens = end - begin;
  info_.first_position += begin;
}

absl::Status SliceKvSource::ReadLayer(int layer, TensorView dst_k, TensorView dst_v) {
  const ChunkInfo& b = base_->info();
  const size_t plane = static_cast<size_t>(b.num_tokens) * b.head_dim;
  scratch_k_.resize(plane * b.kv_heads);
  scratch_v_.resize(plane * b.kv_heads);
  const TensorView sk = TensorView::Contiguous(static_cast<void*>(scratch_k_.data()), DType::kF32,
                                               {b.kv_heads, b.num_tokens, b.head_dim});
  const TensorView sv = TensorView::Contiguous(static_cast<void*>(scratch_v_.data()), DType::kF32,
                                               {b.kv_heads, b.num_tokens, b.head_dim});
  RETURN_IF_ERROR(base_->ReadLayer(layer, sk, sv));
  if (dst_k.shape[0] != b.kv_heads || dst_k.shape[1] != info_.num_tokens ||
      dst_k.shape[2] != b.head_dim || dst_k.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("SliceKvSource: destination ", dst_k.DebugString(), " is not f32 [",
                     b.kv_heads, ", ", info_.num_tokens, ", ", b.head_dim, "]"));
  }
  const size_t rows = static_cast<size_t>(info_.num_tokens) * b.head_dim;
  for (int64_t h = 0; h < b.kv_heads; ++h) {
    const size_t from = h * plane + static_cast<size_t>(begin_) * b.head_dim;
    std::memcpy(dst_k.as<float>() + h * dst_k.stride[0], scratch_k_.data() + from, rows * 4);
    std::memcpy(dst_v.as<float>() + h * dst_v.stride[0], scratch_v_.data() + from, rows * 4);
  }
  return absl::OkStatus();
}

}  // namespace ragkv::blend
