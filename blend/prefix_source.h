// prefix_source.h: exact prefixes as blend rows (issue 20; the automatic
// prefix caching of vLLM / llama.cpp, inside a blend).
//
// A prompt's leading tokens are cut into blocks of `block_tokens`; block n
// is stored under kvstore::PrefixBlockKey(key of block n-1, its tokens)
// (block 0's parent: PrefixRootKey(fingerprint)) with the KV its tokens have
// in that prompt, keys rotated at their absolute positions. A stored chain
// of n blocks is therefore the exact prefill KV of the prompt's first
// n * block_tokens tokens, whatever follows them, and the Blender takes it
// as its exact first segment: loaded, never recomputed, not counted in r.
// Record layout: the KVChunk format (docs/kv_format.md), the block's tokens
// as its token list, the prefix key as its key.
//
// Thread safety: functions are reentrant; a PrefixKvSource is used by one
// Blend at a time (KvSource contract).
#ifndef RAGKV_BLEND_PREFIX_SOURCE_H_
#define RAGKV_BLEND_PREFIX_SOURCE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "blend/kv_source.h"
#include "blend/store_source.h"
#include "kvstore/tiered_store.h"
#include "model/kv_cache.h"

namespace ragkv::blend {

// The chain's keys: kvstore::PrefixBlockKeys (kvstore/chunk_key.h).

// PrefixKvSource: rows [0, blocks * block_tokens) read from stored blocks
// (whole records, fetched and verified at Open), at their own positions
// (info().first_position 0 at prompt offset 0: never re-rotated).
class PrefixKvSource : public KvSource {
 public:
  // Open: the longest run of `keys` (from the first) that the store holds
  // as blocks of `block_tokens` tokens under `fp`; nullptr when the first
  // is missing. A block of another layout ends the run (it is not used).
  static absl::StatusOr<std::unique_ptr<PrefixKvSource>> Open(kvstore::TieredStore* store,
                                                              absl::Span<const kvstore::ChunkKey> keys,
                                                              const kvstore::Fingerprint& fp,
                                                              int block_tokens);
  const ChunkInfo& info() const override { return info_; }
  absl::Status ReadLayer(int layer, kernels::TensorView dst_k, kernels::TensorView dst_v) override;
  int blocks() const { return static_cast<int>(blocks_.size()); }

 private:
  PrefixKvSource() = default;
  ChunkInfo info_;
  int block_tokens_ = 0;
  std::vector<kvstore::ChunkHandle> blocks_;
};

// EncodePrefixBlocks: blocks [first_block, last_block) of `tokens` (the
// prompt) as store records, from `cache`, whose rows [0, last_block *
// block_tokens) must be the exact KV of those tokens (a full prefill, or the
// rows a blend computed exactly). Records in `dtype` with `codec`, under
// the model's fingerprint `fp`; their keys chain from `key_fp` (a tenant's
// salted fingerprint, kvstore::SaltedFingerprint), or from `fp` when null.
absl::StatusOr<std::vector<StoreChunk>> EncodePrefixBlocks(
    const model::KVCache& cache, absl::Span<const int32_t> tokens, const kvstore::Fingerprint& fp,
    int block_tokens, int first_block, int last_block, kernels::DType dtype, kvstore::Codec codec,
    const kvstore::Fingerprint* key_fp = nullptr);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PREFIX_SOURCE_H_
