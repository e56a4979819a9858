// validate.h: request validation of the ragkv.v1 services as pure functions
// of the request message (no server, no I/O), so that the gRPC handlers and
// the protobuf-request fuzzer (fuzz/proto_request_fuzzer.cc) run the same
// code. Each function checks everything that can be decided from the request
// alone (sizes, counts, ranges, enum values, key/fingerprint lengths, the
// PutChunk stream's record order and checksums); what depends on server
// state (the served model's fingerprint, the index dimension, whether a
// chunk exists) stays in the handler.
//
// Errors: INVALID_ARGUMENT for a malformed request, RESOURCE_EXHAUSTED for
// one over a size limit; the message names the field. Thread safety: the
// free functions are pure; a PutChunkAssembler is used by one call at a time.
// Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_VALIDATE_H_
#define RAGKV_SERVICES_INTERNAL_VALIDATE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connector/wire.h"
#include "google/protobuf/repeated_field.h"
#include "kvstore/chunk_key.h"
#include "kernels/tensor.h"
#include "kvstore/kv_chunk.h"
#include "ragkv/v1/blend.pb.h"
#include "ragkv/v1/engine.pb.h"
#include "ragkv/v1/kvstore.pb.h"
#include "ragkv/v1/precompute.pb.h"
#include "ragkv/v1/retrieval.pb.h"
#include "services/internal/byte_budget.h"
#include "services/limits.h"

namespace ragkv::services::internal {

// The limits checked here (kMaxBlendSegments, ...) are public, part of the
// contract: services/limits.h.

// Quoted: `id` in single quotes for an error message, cut to `max` bytes
// with its full length named, so that a hostile id cannot blow an error
// past gRPC's metadata limit (which turns it into RESOURCE_EXHAUSTED).
std::string Quoted(std::string_view id, size_t max = 64);

// ParseChunkKey: the 16-byte content key. INVALID_ARGUMENT otherwise.
absl::StatusOr<kvstore::ChunkKey> ParseChunkKey(std::string_view raw);

// ValidateKeyList: at most kMaxKeysPerCall keys, each 16 bytes.
absl::Status ValidateKeyList(const google::protobuf::RepeatedPtrField<std::string>& keys);

// ValidateGetChunkRequest: key 16 bytes; model_fingerprint empty or 16 bytes.
absl::Status ValidateGetChunkRequest(const v1::GetChunkRequest& req);

// PutChunkExpect: what the served model allows a PutChunk to store (its
// fingerprint and KV layout); absent when the server loads no model.
struct PutChunkExpect {
  kvstore::Fingerprint fingerprint{};
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
};

// PutChunkAssembler: the client stream of PutChunk (a header record, then
// layers 0..L-1 in order), checked record by record as it arrives and
// encoded into kvstore's record format at once (the wire copy is dropped),
// so a stream holds at most one encoded chunk. Add rejects: a second header,
// a layer before the header, an empty record, a layout out of kvstore's
// limits or with an unknown dtype, a token-id count != num_tokens, a
// fingerprint that is not 16 bytes, a key that is not ChunkKey::Of(
// fingerprint, token_ids), a chunk over `max_chunk_bytes`; with `expect`, a
// fingerprint or layout (layers, kv heads, head dim) that is not the served
// model's; then a layer out of order or beyond num_layers, K/V sizes that
// do not match the layout, a LayerKV.checksum that does not match, and K/V
// values that are NaN or infinite (they would poison every blend that loads
// them). The header's declared size is reserved from `budget` (when given)
// before any layer is accepted: RESOURCE_EXHAUSTED when it does not fit.
// Finish (end of stream) rejects an incomplete chunk.
class PutChunkAssembler {
 public:
  struct Options {
    const PutChunkExpect* expect = nullptr;  // null: any model's chunk
    uint64_t max_chunk_bytes = 0;            // 0: kvstore's record limits only
    ByteBudget* budget = nullptr;            // null: no server-wide cap
  };
  PutChunkAssembler() = default;
  explicit PutChunkAssembler(Options options) : options_(options) {}

  absl::Status Add(v1::KVRecord&& rec);
  // SetLayerSink: from now on each encoded layer record goes to `sink`
  // (layer index, record) as soon as it is built, instead of being kept;
  // an error from the sink fails Add. Encode and Take then refuse.
  void SetLayerSink(std::function<absl::Status(uint32_t, std::string)> sink) {
    sink_ = std::move(sink);
  }
  // header_blob / total_bytes: the encoded header and the whole chunk's
  // size (valid once the header record was added).
  const std::string& header_blob() const { return chunk_.header; }
  uint64_t total_bytes() const { return chunk_header_.UncompressedBytes(); }
  // Header: the header's fields once the header record was added.
  absl::StatusOr<kvstore::KvChunkHeader> Header() const {
    if (!have_header_) return absl::InvalidArgumentError("PutChunk: no header");
    return chunk_header_;
  }
  // Finish: the validated chunk's header fields (codec raw, no compression).
  absl::StatusOr<kvstore::KvChunkHeader> Finish() const;
  // Encode: Finish, then a copy of the chunk in kvstore's record format.
  absl::StatusOr<kvstore::EncodedChunk> Encode() const;
  // Take: as Encode, but moves the chunk out (once).
  absl::StatusOr<kvstore::EncodedChunk> Take();

  const v1::KVHeader& header() const { return header_; }

 private:
  absl::Status AddHeader(v1::KVHeader&& h);
  absl::Status AddLayer(const v1::LayerKV& kv);

  Options options_;
  bool have_header_ = false;
  v1::KVHeader header_;
  kvstore::KvChunkHeader chunk_header_;
  kvstore::EncodedChunk chunk_;
  size_t layer_bytes_ = 0;
  uint32_t layers_done_ = 0;
  std::function<absl::Status(uint32_t, std::string)> sink_;
  ByteBudget::Reservation reservation_;
};

// CheckFiniteKv: OK when every element of a raw f32/f16/bf16 payload is
// finite; INVALID_ARGUMENT naming `what` and the first bad element otherwise.
absl::Status CheckFiniteKv(std::string_view bytes, kernels::DType dtype, std::string_view what);

// ValidateBlendOptions: recompute_ratio finite and in [0, 1]; mode and
// output_dtype known enum values.
absl::Status ValidateBlendOptions(const v1::BlendOptions& opts);

// ValidateBlendRequest: 1..kMaxBlendSegments segments, each with a source;
// token segments non-empty with ids >= 0 (and < vocab_size when > 0); text
// segments non-empty; the last segment is the query (tokens or text, not a
// chunk id); the options as ValidateBlendOptions. A raw prompt instead:
// no segments, non-empty ids in the vocabulary, query_tokens <= ids, no
// add_bos.
absl::Status ValidateBlendRequest(const v1::BlendRequest& req, int vocab_size);

// ValidateRetrieveAndBlendRequest: a non-empty query, k in [1, kMaxRetrieveTopK],
// the options as ValidateBlendOptions.
absl::Status ValidateRetrieveAndBlendRequest(const v1::RetrieveAndBlendRequest& req);

// ValidateIngestDocument: one IngestDocuments message: non-empty doc_id and
// text; chunk_vectors, when sent, non-empty and finite.
absl::Status ValidateIngestDocument(const v1::IngestDocumentsRequest& req);
// ValidateWireDocument: the same checks on one Document.
absl::Status ValidateWireDocument(const v1::Document& d);
// ValidateChunkDocumentsRequest: 1..kMaxChunkDocuments documents, each as
// ValidateIngestDocument.
absl::Status ValidateChunkDocumentsRequest(const v1::ChunkDocumentsRequest& req);

// ValidateDeleteDocumentRequest: non-empty doc_id.
absl::Status ValidateDeleteDocumentRequest(const v1::DeleteDocumentRequest& req);

// ValidateSearchRequest: k in [1, kMaxSearchTopK]; a text or a vector query;
// a vector's values finite (its length is checked against the index by the
// handler).
absl::Status ValidateSearchRequest(const v1::SearchRequest& req);

// ValidateStartJobRequest: 1..kMaxJobPaths corpus paths, each non-empty and
// at most kMaxPathBytes; workers <= kMaxJobWorkers; shard_index < shard_count
// when shard_count > 1; neighbours <= kMaxJobNeighbours. Every check that
// needs no state (the proto fuzzer runs it); the paths' existence and
// confinement to --corpus-root are checked by the job manager.
absl::Status ValidateStartJobRequest(const v1::StartJobRequest& req);

// ValidateGetChunksRequest: at most kMaxChunkIdsPerCall ids.
absl::Status ValidateGetChunksRequest(const v1::GetChunksRequest& req);

// ValidateGenerateRequest: a question (text or tokens, token ids >= 0, and
// < vocab_size when > 0); k <= kMaxRetrieveTopK; at most kMaxChunkIdsPerCall
// chunk ids; max_new_tokens <= kMaxGenerateNewTokens; when context > 0,
// question_tokens + max_new_tokens (32 when 0) <= context (OutOfRange: the
// request is refused before anything is sized from it); blend options as
// ValidateBlendOptions.
absl::Status ValidateGenerateRequest(const v1::GenerateRequest& req, int vocab_size,
                                     int context = 0);

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_VALIDATE_H_
