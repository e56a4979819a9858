// kv_source.h: where the Blender gets a chunk's cached KV from, layer by
// layer, plus the in-memory chunk KV and the helper that precomputes it.
//
// KV convention (docs/design.md §3): per layer, K and V are each
// [kv_heads][tokens][head_dim], keys after RoPE at chunk-local positions
// 0..T-1 -- exactly what Model::Prefill of the chunk alone at position 0
// produces (KVCache::ExportLayer). dtype f32, f16 or bf16.
//
// KvSource is the seam between blend/ and the store: the Blender asks each
// source for layer l when it needs it (possibly from a loader thread, see
// LoadingController), and the source writes it, converted to f32, into the
// fused cache. A source that streams (kvstore) may block in ReadLayer until
// the layer has arrived.
//
// Thread safety: a KvSource is used by one Blend call at a time; ReadLayer is
// called for layers 0..L-1 in increasing order from one thread (the loader
// thread when loading overlaps compute). ChunkKV is a plain value type.
#ifndef RAGKV_BLEND_KV_SOURCE_H_
#define RAGKV_BLEND_KV_SOURCE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/tensor.h"
#include "model/model.h"

namespace ragkv::blend {

// ChunkInfo: what a source says about its chunk (checked against the model
// before anything is read).
struct ChunkInfo {
  model::Fingerprint fingerprint{};
  kernels::DType dtype = kernels::DType::kF32;  // element type of the cached KV
  int num_layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int64_t num_tokens = 0;
  // first_position: the chunk-local position of row 0 (0 for a whole chunk;
  // b for SliceKvSource's rows [b, e)). The Blender re-rotates keys by
  // (prompt offset - first_position).
  int64_t first_position = 0;
};

class KvSource {
 public:
  virtual ~KvSource() = default;

  // info: the chunk's header. Must be valid before the first ReadLayer.
  virtual const ChunkInfo& info() const = 0;

  // ReadLayer: writes layer `layer`'s K and V, converted to f32 and still at
  // chunk-local positions (not re-rotated), into dst_k / dst_v: f32 views
  // [kv_heads, num_tokens, head_dim] with unit last stride and any head
  // stride (they point into the fused cache). Called once per layer, in
  // increasing layer order. Errors: DataLoss/NotFound/Unavailable from the
  // store are returned as is; the blend then fails as a whole.
  virtual absl::Status ReadLayer(int layer, kernels::TensorView dst_k,
                                 kernels::TensorView dst_v) = 0;
};

// ChunkKV: one chunk's complete KV in memory (a precompute result, or a test
// fixture). k[l] / v[l] hold kv_heads*num_tokens*head_dim elements of `dtype`
// as raw bytes, layout [kv_heads][tokens][head_dim].
struct ChunkKV {
  ChunkInfo info;
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint8_t>> k, v;  // per layer

  // LayerK / LayerV: contiguous views of layer l ([kv_heads, T, head_dim]).
  kernels::TensorView LayerK(int l) const;
  kernels::TensorView LayerV(int l) const;
};

// PrecomputeChunk: runs Model::Prefill on `tokens` alone at positions
// 0..T-1 and exports every layer in `dtype` (f32, f16 or bf16), stamped with
// the model's fingerprint. Errors: InvalidArgument for empty tokens, bad ids
// or dtype kI8; OutOfRange past the model's context length.
absl::StatusOr<ChunkKV> PrecomputeChunk(const model::Model& model,
                                        absl::Span<const int32_t> tokens, kernels::DType dtype);
// PrecomputeChunk with the model's configured KV dtype.
absl::StatusOr<ChunkKV> PrecomputeChunk(const model::Model& model,
                                        absl::Span<const int32_t> tokens);

// PrecomputeChunkAfter: like PrecomputeChunk, but the chunk is prefilled
// after `context` (typically the fixed system prefix every prompt starts
// with, e.g. BOS), so its cached KV already saw a real attention sink; its
// keys are then re-rotated back by -context.size() to chunk-local positions
// 0..T-1, so the record has exactly the layout of docs/design.md §3. The KV now
// depends on `context`: a store key must commit to it (see docs/blend.md).
// Empty `context` is PrecomputeChunk.
absl::StatusOr<ChunkKV> PrecomputeChunkAfter(const model::Model& model,
                                             absl::Span<const int32_t> context,
                                             absl::Span<const int32_t> tokens,
                                             kernels::DType dtype);

// PrecomputeChunkInContext: the chunk's rows of one prefill of `context`
// followed by `tokens` (a neighbour-aware record's KV: context = [BOS] + the
// chunk's nearest chunks, docs/kv_format.md "Neighbour-aware records").
// Unlike PrecomputeChunkAfter nothing is re-rotated: the keys stay at the
// positions they had in that prefill, P .. P+T-1 with P = context.size(),
// and info.first_position = P, so the Blender rotates each key once, from
// P to its prompt offset. Errors: as PrecomputeChunk; InvalidArgument for an
// empty context.
absl::StatusOr<ChunkKV> PrecomputeChunkInContext(const model::Model& model,
                                                 absl::Span<const int32_t> context,
                                                 absl::Span<const int32_t> tokens,
                                                 kernels::DType dtype);

// InMemoryKvSource: a KvSource over a ChunkKV that the caller keeps alive
// (non-owning pointer) or hands over (shared_ptr).
class InMemoryKvSource : public KvSource {
 public:
  explicit InMemoryKvSource(const ChunkKV* chunk) : chunk_(chunk) {}
  explicit InMemoryKvSource(std::shared_ptr<const ChunkKV> chunk)
      : owned_(std::move(chunk)), chunk_(owned_.get()) {}

  const ChunkInfo& info() const override { return chunk_->info; }
  absl::Status ReadLayer(int layer, kernels::TensorView dst_k, kernels::TensorView dst_v) override;

 private:
  std::shared_ptr<const ChunkKV> owned_;
  const ChunkKV* chunk_;
};

// SliceKvSource: rows [begin, end) of another source's chunk, e.g. a chunk
// found inside a raw prompt whose boundary tokens tokenized differently in
// context (retrieval/chunk_matcher.h). Its info() is the base's with
// num_tokens = end - begin and first_position = base's + begin; ReadLayer
// reads the base's whole layer into a scratch buffer and copies the rows.
class SliceKvSource : public KvSource {
 public:
  // Create: InvalidArgument unless 0 <= begin < end <= base->info().num_tokens.
  static absl::StatusOr<std::unique_ptr<SliceKvSource>> Create(std::unique_ptr<KvSource> base,
                                                               int64_t begin, int64_t end);
  const ChunkInfo& info() const override { return info_; }
  absl::Status ReadLayer(int layer, kernels::TensorView dst_k, kernels::TensorView dst_v) override;
  KvSource* base() const { return base_.get(); }

 private:
  SliceKvSource(std::unique_ptr<KvSource> base, int64_t begin, int64_t end);
  std::unique_ptr<KvSource> base_;
  int64_t begin_;
  ChunkInfo info_;
  std::vector<float> scratch_k_, scratch_v_;
};

// CopyHeadsToF32: converts a contiguous [heads, T, D] view of f32/f16/bf16
// into a strided f32 destination of the same shape (unit last stride). Used
// by sources; exposed for the store adapter.
absl::Status CopyHeadsToF32(kernels::TensorView src, kernels::TensorView dst);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_KV_SOURCE_H_
