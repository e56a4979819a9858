// chunk_key.h: model fingerprints and the two deterministic 128-bit key
// families of the KV store (docs/design.md §3, docs/kv_format.md §1).
//
//  * ChunkKey::Of(fp, tokens): position-independent chunk key,
//      XXH3-128( fp[16] || token ids as little-endian int32 ), no seed.
//    The same passage hashes the same in every process, restart and machine.
//  * Prefix-chained family (vLLM-style exact-prefix reuse):
//      PrefixRootKey(fp)            = XXH3-128( "ragkv/prefix/v1" || fp[16] )
//      PrefixBlockKey(parent, toks) = XXH3-128( 'P' || parent[16] || toks LE int32 )
//    so block n's key commits to the fingerprint and to every token before it.
//  * NeighbourChunkKey(fp, lead, neighbour_keys, tokens): the key of a
//    neighbour-aware record (the chunk's KV computed after lead + its
//    nearest chunks; docs/kv_format.md "Neighbour-aware records"):
//      XXH3-128( "ragkv/neighbours/v1" || fp[16] || u32 |lead| || lead LE int32
//                || u32 n || neighbour_keys[0..n) (16 bytes each, context order)
//                || tokens LE int32 )
//    The tag gives it its own family: it never equals a ChunkKey::Of.
//  * SaltedFingerprint(fp, salt): a tenant's key namespace (cache_salt):
//      XXH3-128( "ragkv/salt/v1" || fp[16] || salt bytes ), used in place of
//      fp by the key functions above for that tenant's traffic.
//
// Byte order: a key's 16 bytes are XXH128's canonical (big-endian) form;
// ToHex prints them in order (32 lowercase hex digits). These definitions are
// part of the on-disk/wire format: never change them without a format bump.
//
// Thread safety: plain values; all functions are pure and thread-safe.
#ifndef RAGKV_KVSTORE_CHUNK_KEY_H_
#define RAGKV_KVSTORE_CHUNK_KEY_H_

#include <array>
#include <compare>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ragkv::kvstore {

// Fingerprint: 16-byte digest of everything that changes a model's KV
// (architecture, dims, RoPE, eps, weights, KV dtype). Produced by model/;
// the store only compares it. A fetch under another fingerprint is a miss.
using Fingerprint = std::array<uint8_t, 16>;

// FingerprintToHex / FingerprintFromHex: 32 lowercase hex digits.
// FromHex: InvalidArgument unless exactly 32 hex digits (either case).
std::string FingerprintToHex(const Fingerprint& fp);
absl::StatusOr<Fingerprint> FingerprintFromHex(std::string_view hex);

// ChunkKey: a 128-bit content key. Value type, totally ordered, hashable
// (absl::Hash / std::hash), usable as a map key.
struct ChunkKey {
  std::array<uint8_t, 16> bytes{};

  // Of: the chunk key of `tokens` under model `fp` (see file comment).
  static ChunkKey Of(const Fingerprint& fp, absl::Span<const int32_t> tokens);
  // FromHex: InvalidArgument unless exactly 32 hex digits.
  static absl::StatusOr<ChunkKey> FromHex(std::string_view hex);
  // FromBytes: InvalidArgument unless exactly 16 bytes.
  static absl::StatusOr<ChunkKey> FromBytes(std::string_view raw);

  // ToHex: 32 lowercase hex digits (the form used in logs and Redis keys).
  std::string ToHex() const;
  // AsBytes: the 16 raw bytes as a string_view into this object.
  std::string_view AsBytes() const {
    return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  // Hi64/Lo64: the key as two big-endian 64-bit halves (for sharding/hashing).
  uint64_t Hi64() const;
  uint64_t Lo64() const;

  friend bool operator==(const ChunkKey& a, const ChunkKey& b) = default;
  friend auto operator<=>(const ChunkKey& a, const ChunkKey& b) = default;

  template <typename H>
  friend H AbslHashValue(H h, const ChunkKey& k) {
    return H::combine(std::move(h), k.Hi64(), k.Lo64());
  }
};

// SaltedFingerprint: the key namespace of a tenant's traffic (a request's
// cache_salt, vLLM's field): XXH3-128( "ragkv/salt/v1" || fp[16] || salt ).
// Keys derived from it (ChunkKey::Of, PrefixRootKey) never equal keys of
// another salt or of no salt, so tenants neither share nor probe each
// other's KV. An empty salt returns `fp` unchanged.
Fingerprint SaltedFingerprint(const Fingerprint& fp, std::string_view salt);

// NeighbourChunkKey: the key of the record of `tokens` computed after the
// context `lead` (e.g. {BOS}, or empty) followed by the chunks whose plain
// keys (ChunkKey::Of(fp, their tokens)) are `neighbour_keys`, in the order
// they were placed. It commits to the model, the exact context and the
// chunk, so a record computed in one context is found only by a lookup for
// that same context, and never by a plain ChunkKey::Of lookup.
ChunkKey NeighbourChunkKey(const Fingerprint& fp, absl::Span<const int32_t> lead,
                           absl::Span<const ChunkKey> neighbour_keys,
                           absl::Span<const int32_t> tokens);

// PrefixRootKey: the parent of the first block of a prefix chain under `fp`.
ChunkKey PrefixRootKey(const Fingerprint& fp);
// PrefixBlockKey: key of the block `block_tokens` that follows the prefix
// whose key is `parent` (the root or a previous block key).
ChunkKey PrefixBlockKey(const ChunkKey& parent, absl::Span<const int32_t> block_tokens);
// PrefixBlockKeys: the chained keys of the full blocks of `tokens` (block i
// covers tokens [i*block_tokens, (i+1)*block_tokens)); none when
// block_tokens < 1. The one derivation of the chain: the pipeline's lookup
// and store, and the server's reorder pass.
std::vector<ChunkKey> PrefixBlockKeys(const Fingerprint& fp, absl::Span<const int32_t> tokens,
                                      int block_tokens);

// ChunkKeyHash: std-style hasher (key bits are already uniform; uses Lo64).
struct ChunkKeyHash {
  size_t operator()(const ChunkKey& k) const { return static_cast<size_t>(k.Lo64()); }
};

}  // namespace ragkv::kvstore

template <>
struct std::hash<ragkv::kvstore::ChunkKey> {
  size_t operator()(const ragkv::kvstore::ChunkKey& k) const {
    return ragkv::kvstore::ChunkKeyHash()(k);
  }
};

#endif  // RAGKV_KVSTORE_CHUNK_KEY_H_
