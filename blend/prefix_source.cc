#include "blend/prefix_source.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ragkv::blend {

absl::StatusOr<std::unique_ptr<PrefixKvSource>> PrefixKvSource::Open(
    kvstore::TieredStore* store, absl::Span<const kvstore::ChunkKey> keys,
    const kvstore::Fingerprint& fp, int block_tokens) {
  if (store == nullptr || block_tokens < 1) {
    return absl::InvalidArgumentError("PrefixKvSource: null store or block_tokens < 1");
  }
  std::unique_ptr<PrefixKvSource> s(new PrefixKvSource());
  s->block_tokens_ = block_tokens;
  std::vector<std::optional<kvstore::ChunkHandle>> got = store->MultiGet(keys, fp);
  for (std::optional<kvstore::ChunkHandle>& h : got) {
    if (!h.has_value() || h->header.num_tokens() != static_cast<uint32_t>(block_tokens) ||
        h->header.context != kvstore::RecordContext::kChunkLocal) {
      break;  // a record of another context is never an exact block
    }
    if (!s->blocks_.empty()) {
      const kvstore::KvChunkHeader& a = s->blocks_.front().header;
      if (h->header.num_layers != a.num_layers || h->header.num_kv_heads != a.num_kv_heads ||
          h->header.head_dim != a.head_dim || h->header.dtype != a.dtype) {
        break;
      }
    }
    s->blocks_.push_back(std::move(*h));
  }
  if (s->blocks_.empty()) return std::unique_ptr<PrefixKvSource>();
  const kvstore::KvChunkHeader& h = s->blocks_.front().header;
  s->info_.fingerprint = h.fingerprint;
  s->info_.dtype = h.dtype;
  s->info_.num_layers = static_cast<int>(h.num_layers);
  s->info_.kv_heads = static_cast<int>(h.num_kv_heads);
  s->info_.head_dim = static_cast<int>(h.head_dim);
  s->info_.num_tokens = static_cast<int64_t>(s->blocks_.size()) * block_tokens;
  s->info_.first_position = 0;
  return s;
}

absl::Status PrefixKvSource::ReadLayer(int layer, kernels::TensorView dst_k,
                                       kernels::TensorView dst_v) {
  if (layer < 0 || layer >= info_.num_layers) {
    return absl::OutOfRangeError(absl::StrCat("PrefixKvSource: no layer ", layer));
  }
  for (size_t b = 0; b < blocks_.size(); ++b) {
    kernels::TensorView k = dst_k, v = dst_v;
    for (kernels::TensorView* t : {&k, &v}) {
      t->shape[1] = block_tokens_;
      t->data = static_cast<float*>(t->data) + static_cast<int64_t>(b) * block_tokens_ * t->stride[1];
    }
    const kvstore::ChunkHandle& h = blocks_[b];
    RETURN_IF_ERROR(kvstore::DecodeLayerInto(h.header, h.layers[layer].blob.view(),
                                             static_cast<uint32_t>(layer), k, v));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StoreChunk>> EncodePrefixBlocks(
    const model::KVCache& cache, absl::Span<const int32_t> tokens, const kvstore::Fingerprint& fp,
    int block_tokens, int first_block, int last_block, kernels::DType dtype, kvstore::Codec codec,
    const kvstore::Fingerprint* key_fp) {
  const std::vector<kvstore::ChunkKey> keys =
      kvstore::PrefixBlockKeys(key_fp != nullptr ? *key_fp : fp, tokens, block_tokens);
  if (first_block < 0 || last_block > static_cast<int>(keys.size()) ||
      static_cast<int64_t>(last_block) * block_tokens > cache.num_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("EncodePrefixBlocks: blocks [", first_block, ", ",
                                                   last_block, ") of ", keys.size(), " / ",
                                                   cache.num_tokens(), " cached rows"));
  }
  const int L = cache.n_layers(), H = cache.kv_heads(), D = cache.head_dim();
  const int64_t n = static_cast<int64_t>(H) * block_tokens * D;
  std::vector<StoreChunk> out;
  for (int b = first_block; b < last_block; ++b) {
    ChunkKV kv;
    kv.info = {fp, dtype, L, H, D, block_tokens, 0};
    kv.tokens.assign(tokens.begin() + b * block_tokens, tokens.begin() + (b + 1) * block_tokens);
    for (int l = 0; l < L; ++l) {
      kv.k.emplace_back(n * kernels::DTypeSize(dtype));
      kv.v.emplace_back(n * kernels::DTypeSize(dtype));
      RETURN_IF_ERROR(cache.ExportLayer(l, static_cast<int64_t>(b) * block_tokens, block_tokens,
                                        dtype, kv.k.back().data(), kv.v.back().data()));
    }
    ASSIGN_OR_RETURN(StoreChunk sc, EncodeForStoreAs(kv, keys[b], codec));
    out.push_back(std::move(sc));
  }
  return out;
}

}  // namespace ragkv::blend
