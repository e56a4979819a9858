// kv_cache.h: KVCache, the per-layer key/value cache of one sequence, and
// LayerKVView, the non-owning per-layer view the layer-level API works on.
//
// Layout (the cache layout of kernels/attention.h and docs/design.md §3): for each
// layer, K and V are each f32 [kv_heads][capacity_tokens][head_dim]; keys are
// stored after RoPE at their absolute positions. Tokens 0..num_tokens()-1 are
// valid. Thread-compatible: one writer, or many readers.
#ifndef RAGKV_MODEL_KV_CACHE_H_
#define RAGKV_MODEL_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "model/config.h"

namespace ragkv::model {

// LayerKVView: K and V of one layer, each f32 [kv_heads, N, head_dim] with
// unit last stride (stride[1] == head_dim; stride[0] may exceed N*head_dim
// when N is less than a cache's capacity). N is the number of context tokens
// attention may read (positions 0..N-1). Does not own memory.
struct LayerKVView {
  kernels::TensorView k;
  kernels::TensorView v;
  int64_t num_tokens() const { return k.shape[1]; }
};

// KVCacheFloats / KVCacheBytes: the size of a KVCache of `capacity_tokens`
// tokens for `config` (validated: head_dim set): n_layers x {K, V} x
// kv_heads x capacity_tokens x head_dim f32 values. This is the fused
// cache a blend builds and the memory KVCachePool keeps.
inline size_t KVCacheFloats(const ModelConfig& config, int64_t capacity_tokens) {
  return size_t(config.n_layers) * 2 * size_t(config.n_kv_heads) * size_t(capacity_tokens) *
         size_t(config.head_dim);
}
inline size_t KVCacheBytes(const ModelConfig& config, int64_t capacity_tokens) {
  return KVCacheFloats(config, capacity_tokens) * sizeof(float);
}

class KVCache {
 public:
  // Create: a zeroed cache for `capacity_tokens` tokens of every layer of a
  // model with `config`. InvalidArgument if capacity_tokens <= 0 or the
  // config is invalid.
  static absl::StatusOr<KVCache> Create(const ModelConfig& config, int64_t capacity_tokens);

  KVCache(KVCache&&) = default;
  KVCache& operator=(KVCache&&) = default;

  int n_layers() const { return n_layers_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  int64_t capacity_tokens() const { return capacity_; }
  int64_t num_tokens() const { return num_tokens_; }
  // set_num_tokens: marks tokens [0, n) valid (Prefill does this). Used by
  // callers that fill the cache themselves (blend/). Requires n <= capacity.
  absl::Status set_num_tokens(int64_t n);

  // Layer: the view of layer `l` over tokens [0, n) (n <= capacity).
  // Valid as long as the cache lives and is not moved.
  LayerKVView Layer(int l, int64_t n) const;
  LayerKVView Layer(int l) const { return Layer(l, num_tokens_); }
  float* k_data(int l) { return data_.data() + LayerOffset(l); }
  float* v_data(int l) { return data_.data() + LayerOffset(l) + PlaneSize(); }

  // ExportLayer: copies layer l's K and V for tokens [begin, begin+count)
  // into dst_k / dst_v, each laid out [kv_heads][count][head_dim] of `dtype`
  // (f32, f16 or bf16) — the KV record layout of docs/design.md §3.
  // dst_* must hold kv_heads*count*head_dim elements.
  absl::Status ExportLayer(int l, int64_t begin, int64_t count, kernels::DType dtype, void* dst_k,
                           void* dst_v) const;
  // ImportLayer: the inverse; src_* are [kv_heads][count][head_dim] of
  // `dtype`, written to tokens [begin, begin+count). Does not change
  // num_tokens().
  absl::Status ImportLayer(int l, int64_t begin, int64_t count, kernels::DType dtype,
                           const void* src_k, const void* src_v);

 private:
  friend class KVCachePool;
  KVCache() = default;
  // Create over `storage` (its memory reused: resized and zeroed).
  static absl::StatusOr<KVCache> Create(const ModelConfig& config, int64_t capacity_tokens,
                                        std::vector<float> storage);
  size_t PlaneSize() const { return size_t(kv_heads_) * capacity_ * head_dim_; }
  size_t LayerOffset(int l) const { return size_t(l) * 2 * PlaneSize(); }

  int n_layers_ = 0, kv_heads_ = 0, head_dim_ = 0;
  int64_t capacity_ = 0, num_tokens_ = 0;
  std::vector<float> data_;
};

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_KV_CACHE_H_
