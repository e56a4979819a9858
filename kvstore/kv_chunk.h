// kv_chunk.h: the KVChunk codec -- one header blob plus one record blob per
// layer, each independently checksummed (XXH3-64), so a reader can verify and
// consume layer i while layer i+1 is still in flight. Byte layouts are
// specified in docs/kv_format.md (format version 1).
//
// Tensor convention (docs/design.md §3): per layer, K and V are each
// [num_kv_heads][num_tokens][head_dim], keys after RoPE at chunk-local
// positions 0..T-1.
//
// Codecs: kRaw stores K/V in the header's dtype (f32, f16 or bf16) bit-exact;
// kInt8PerChannel stores int8 plus one f32 scale per (head, channel) for K and
// for V (kernels/quant.h), |error| <= scale/2 per element; kFp8E4M3PerHead
// stores OCP e4m3 codes plus one f32 scale per head for K and for V, error
// <= max(|x| 2^-4, scale 2^-10); kInt4Grouped stores 4-bit codes with an f16
// (step, lo) pair per group of 32 (K per channel along the tokens, V per
// token along the channels; KIVI), error <= step/2. Any may be wrapped in zstd
// (Compression::kZstd).
//
// Errors from decoding untrusted bytes: DataLoss (checksum mismatch,
// truncation, wrong magic, record bound to another header, wrong layer),
// Unimplemented (unknown format version, codec, compression or dtype),
// InvalidArgument (bad shapes/limits passed by the caller when encoding).
//
// Thread safety: all functions are pure; KvChunkEncoder is not thread-safe
// (one thread builds one chunk).
#ifndef RAGKV_KVSTORE_KV_CHUNK_H_
#define RAGKV_KVSTORE_KV_CHUNK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "kvstore/chunk_key.h"

namespace ragkv::kvstore {

inline constexpr uint16_t kKvFormatVersion = 1;
// Fixed sizes of the v1 layout (docs/kv_format.md).
inline constexpr size_t kHeaderFixedBytes = 64;   // before the token ids
inline constexpr size_t kHeaderChecksumBytes = 8;  // after the token ids
inline constexpr size_t kLayerPrefixBytes = 64;   // before the payload
// Offset of the 16-byte fingerprint inside a header blob (stable across
// versions so tiers can index by fingerprint without a full decode).
inline constexpr size_t kHeaderFingerprintOffset = 16;

// Sanity limits enforced on encode and decode (bad input, not policy).
inline constexpr uint32_t kMaxLayers = 1024;
inline constexpr uint32_t kMaxKvHeads = 1024;
inline constexpr uint32_t kMaxHeadDim = 4096;
inline constexpr uint32_t kMaxTokens = 1u << 20;
inline constexpr uint64_t kMaxLayerPayloadBytes = uint64_t{4} << 30;

// Codec: how one layer's K/V numbers are represented. Values are on disk.
enum class Codec : uint8_t {
  kRaw = 0,
  kInt8PerChannel = 1,
  kFp8E4M3PerHead = 2,
  kInt4Grouped = 3,
};
// Compression: byte-level wrapping of a layer payload. Values are on disk.
enum class Compression : uint8_t { kNone = 0, kZstd = 1 };
// RecordContext: the context a record's KV was computed in (docs/kv_format.md
// "Neighbour-aware records"). Values are on disk (header byte 9).
//  * kChunkLocal: the chunk alone (or a prefix block, or a chunk after a
//    fixed system prefix re-rotated back): rows at chunk-local positions
//    first_position = 0. Every record written before issue 40.
//  * kNeighbours: the chunk prefilled after [BOS] + its nearest chunks
//    (ragkv precompute --neighbours k); its rows are those of that prefill,
//    keys rotated at positions first_position .. first_position + T - 1.
//    Stored only under NeighbourChunkKey (chunk_key.h), never a plain key.
enum class RecordContext : uint8_t { kChunkLocal = 0, kNeighbours = 1 };
const char* CodecName(Codec c);
const char* CompressionName(Compression c);
// RecordContextName: "chunk-local" | "neighbours".
const char* RecordContextName(RecordContext c);
// ParseCodec: "raw" | "int8" | "fp8" | "int4" (CodecName's spellings) to the enum;
// InvalidArgument naming the choices otherwise.
absl::StatusOr<Codec> ParseCodec(std::string_view name);

// KvChunkHeader: the decoded header. `digest` is the XXH3-64 checksum stored
// at the end of the header blob; every layer record carries it, binding the
// record to exactly this header (so layers of two different encodings of the
// same key are never mixed).
struct KvChunkHeader {
  uint16_t version = kKvFormatVersion;
  Fingerprint fingerprint{};
  ChunkKey key{};
  // Element type of the KV as produced (kRaw stores this type; kInt8 records
  // it for information). f32, f16 or bf16.
  kernels::DType dtype = kernels::DType::kF16;
  Codec codec = Codec::kRaw;
  Compression compression = Compression::kNone;
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  std::vector<int32_t> tokens;  // the chunk's token ids (num_tokens = size)
  uint64_t digest = 0;          // set by EncodeHeader / DecodeHeader
  // context / first_position: the context the KV was computed in and the
  // position of row 0's key in it (header byte 9 and bytes 60..63). A
  // kChunkLocal record has first_position 0 (bytes identical to records
  // written before these fields existed); a kNeighbours one > 0.
  RecordContext context = RecordContext::kChunkLocal;
  uint32_t first_position = 0;

  uint32_t num_tokens() const { return static_cast<uint32_t>(tokens.size()); }
  // LayerElements: elements in one of K or V of one layer (H * T * D).
  uint64_t LayerElements() const {
    return uint64_t{num_kv_heads} * num_tokens() * head_dim;
  }
  // RawPayloadBytes: uncompressed payload bytes of one layer record.
  uint64_t RawPayloadBytes() const;
  // UncompressedBytes: the header blob plus every layer record, without zstd
  // (what EncodedChunk::TotalBytes is for Compression::kNone).
  uint64_t UncompressedBytes() const;
};

// EncodedChunk: the bytes a tier stores for one key: the header blob and one
// record blob per layer (layers[i] is layer i). Immutable once built; shared
// between tiers as std::shared_ptr<const EncodedChunk>.
struct EncodedChunk {
  std::string header;
  std::vector<std::string> layers;
  // TotalBytes: header + all layer records.
  size_t TotalBytes() const;
};

// ValidateHeader: checks dtype/codec/compression/context known and shapes
// within the limits above, num_layers/num_kv_heads/head_dim/tokens non-zero,
// first_position 0 for kChunkLocal and in 1 .. kMaxTokens for kNeighbours.
absl::Status ValidateHeader(const KvChunkHeader& header);

// EncodeHeader: serializes `header` (digest ignored) and sets header->digest.
absl::StatusOr<std::string> EncodeHeader(KvChunkHeader* header);

// DecodeHeader: parses and verifies a header blob (magic, version, checksum,
// limits, exact size).
absl::StatusOr<KvChunkHeader> DecodeHeader(std::string_view blob);

// CheckRecordContext: OK when the record is of the `expected` variant;
// otherwise FailedPrecondition naming both variants and the key, e.g.
// "kv record 0f..: a neighbours record (first position 37), requested as a
// chunk-local one". Readers call it before serving a record, so a record
// computed in another context is never served as a plain one.
absl::Status CheckRecordContext(const KvChunkHeader& header, RecordContext expected);

// PeekFingerprint / PeekNumLayers: read fields at their fixed offsets without
// verifying the checksum (for tier-side indexing). DataLoss if too short or
// the magic is wrong.
absl::StatusOr<Fingerprint> PeekFingerprint(std::string_view header_blob);
absl::StatusOr<uint32_t> PeekNumLayers(std::string_view header_blob);

// EncodeOptions: knobs for layer encoding.
struct EncodeOptions {
  int zstd_level = 1;  // used when header.compression == kZstd (1..19)
};

// EncodeLayer: builds the record of layer `layer` of the chunk described by
// `header` (header.digest must be set, i.e. EncodeHeader called first).
// k, v: [num_kv_heads][num_tokens][head_dim] contiguous, dtype f32/f16/bf16
// (converted to header.dtype for kRaw; quantized from f32 for kInt8 / kFp8:
// other dtypes are widened first; fp8 refuses non-finite values, int4 also
// values beyond the f16 range).
absl::StatusOr<std::string> EncodeLayer(const KvChunkHeader& header, uint32_t layer,
                                        kernels::TensorView k, kernels::TensorView v,
                                        const EncodeOptions& options = {});

// LayerRecordView: a verified, parsed record; views point into the blob given
// to ParseLayerRecord and are valid while it is.
struct LayerRecordView {
  uint32_t layer = 0;
  Codec codec = Codec::kRaw;
  Compression compression = Compression::kNone;
  uint64_t raw_payload_bytes = 0;
  std::string_view stored_payload;  // compressed if compression == kZstd
};

// ParseLayerRecord: checks magic, version, checksum,
// binding to `header` (digest, codec, compression, payload size) and that
// the record is layer `expected_layer`. DataLoss on any mismatch.
absl::StatusOr<LayerRecordView> ParseLayerRecord(const KvChunkHeader& header,
                                                 std::string_view blob,
                                                 uint32_t expected_layer);

// DecodeLayerToF32: verifies and decodes layer `layer` into k_out and v_out,
// each f32 [num_kv_heads][num_tokens][head_dim] (LayerElements() floats).
absl::Status DecodeLayerToF32(const KvChunkHeader& header, std::string_view blob,
                              uint32_t layer, float* k_out, float* v_out);

// DecodeLayerInto: like DecodeLayerToF32, but into f32 views dst_k / dst_v
// of shape [num_kv_heads, num_tokens, head_dim] with unit last stride and any
// row / head strides (e.g. a chunk's rows in the fused cache): no full-size
// intermediate copy for uncompressed records (zstd ones are decompressed to
// a scratch buffer first).
absl::Status DecodeLayerInto(const KvChunkHeader& header, std::string_view blob, uint32_t layer,
                             kernels::TensorView dst_k, kernels::TensorView dst_v);

// RawLayerViews: zero-copy K/V views into an uncompressed kRaw record
// (dtype = header.dtype, shape [H, T, D]); FailedPrecondition for other
// codecs. The views alias `blob` (valid while it is, e.g. while pinned).
struct RawLayer {
  kernels::TensorView k;
  kernels::TensorView v;
};
absl::StatusOr<RawLayer> RawLayerViews(const KvChunkHeader& header, std::string_view blob,
                                       uint32_t layer);

// EncodeChunk: one-shot encoder. `layer_k[i]`, `layer_v[i]` as in EncodeLayer.
// Sets header->digest.
absl::StatusOr<EncodedChunk> EncodeChunk(KvChunkHeader* header,
                                         const std::vector<kernels::TensorView>& layer_k,
                                         const std::vector<kernels::TensorView>& layer_v,
                                         const EncodeOptions& options = {});

}  // namespace ragkv::kvstore

#endif  // RAGKV_KVSTORE_KV_CHUNK_H_
