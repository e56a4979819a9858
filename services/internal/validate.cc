#include "services/internal/validate.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "blend/blender.h"
#include "connector/wire.h"
#include "kernels/tensor.h"

namespace ragkv::services::internal {
namespace {

absl::Status CheckTokenIds(const google::protobuf::RepeatedField<int32_t>& ids, int vocab_size,
                           std::string_view what) {
  for (int i = 0; i < ids.size(); ++i) {
    const int32_t t = ids[i];
    if (t < 0 || (vocab_size > 0 && t >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: token id %d at %d outside [0, %d)", what, t, i, vocab_size > 0 ? vocab_size : 0));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string Quoted(std::string_view id, size_t max) {
  if (id.size() <= max) return "'" + std::string(id) + "'";
  return "'" + std::string(id.substr(0, max)) + absl::StrFormat("...' (%d bytes)", id.size());
}

absl::StatusOr<kvstore::ChunkKey> ParseChunkKey(std::string_view raw) {
  auto k = kvstore::ChunkKey::FromBytes(raw);
  if (!k.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chunk key must be 16 bytes, got %d", raw.size()));
  }
  return *k;
}

absl::Status ValidateKeyList(const google::protobuf::RepeatedPtrField<std::string>& keys) {
  if (keys.size() > kMaxKeysPerCall) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d keys in one call (max %d)", keys.size(), kMaxKeysPerCall));
  }
  for (const std::string& k : keys) RETURN_IF_ERROR(ParseChunkKey(k).status());
  return absl::OkStatus();
}

absl::Status ValidateGetChunkRequest(const v1::GetChunkRequest& req) {
  RETURN_IF_ERROR(ParseChunkKey(req.key()).status());
  if (!req.model_fingerprint().empty()) {
    RETURN_IF_ERROR(wire::FingerprintFromBytes(req.model_fingerprint()).status());
  }
  return absl::OkStatus();
}

// ---- PutChunk ----

absl::Status CheckFiniteKv(std::string_view bytes, kernels::DType dtype, std::string_view what) {
  // Non-finite: exponent bits all ones (f16 0x7c00, bf16 0x7f80, f32 0x7f800000).
  auto scan = [&](auto word, auto mask) -> absl::Status {
    using W = decltype(word);
    const size_t n = bytes.size() / sizeof(W);
    for (size_t i = 0; i < n; ++i) {
      W w;
      std::memcpy(&w, bytes.data() + i * sizeof(W), sizeof(W));
      if ((w & mask) == mask) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: element %d is NaN or infinite; refused (it would poison every blend)", what, i));
      }
    }
    return absl::OkStatus();
  };
  switch (dtype) {
    case kernels::DType::kF16: return scan(uint16_t{0}, uint16_t{0x7c00});
    case kernels::DType::kBF16: return scan(uint16_t{0}, uint16_t{0x7f80});
    case kernels::DType::kF32: return scan(uint32_t{0}, uint32_t{0x7f800000});
    default: return absl::InvalidArgumentError(std::string(what) + ": unsupported dtype");
  }
}

absl::Status PutChunkAssembler::Add(v1::KVRecord&& rec) {
  if (rec.has_header()) {
    if (have_header_) return absl::InvalidArgumentError("PutChunk: second header");
    return AddHeader(std::move(*rec.mutable_header()));
  }
  if (!rec.has_layer()) return absl::InvalidArgumentError("PutChunk: empty record");
  if (!have_header_) return absl::InvalidArgumentError("PutChunk: layer before header");
  return AddLayer(rec.layer());
}

namespace {

absl::Status CheckExpectedLayout(const v1::KVLayout& l, const kvstore::Fingerprint& fp,
                                 const PutChunkExpect& e) {
  if (fp != e.fingerprint) {
    return absl::InvalidArgumentError("PutChunk: model_fingerprint is not the served model's");
  }
  if (l.num_layers() != e.num_layers || l.num_kv_heads() != e.num_kv_heads ||
      l.head_dim() != e.head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PutChunk: layout %d layers x %d kv heads x head_dim %d is not the served model's "
        "(%d x %d x %d)",
        l.num_layers(), l.num_kv_heads(), l.head_dim(), e.num_layers, e.num_kv_heads,
        e.head_dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PutChunkAssembler::AddHeader(v1::KVHeader&& hdr) {
  const v1::KVLayout& l = hdr.layout();
  ASSIGN_OR_RETURN(kernels::DType dt, wire::KernelDTypeFromProto(l.dtype()));
  if (l.num_layers() == 0 || l.num_kv_heads() == 0 || l.head_dim() == 0 ||
      l.num_tokens() == 0 || l.num_layers() > kvstore::kMaxLayers ||
      l.num_kv_heads() > kvstore::kMaxKvHeads || l.head_dim() > kvstore::kMaxHeadDim ||
      l.num_tokens() > kvstore::kMaxTokens) {
    return absl::InvalidArgumentError("PutChunk: layout out of range");
  }
  if (static_cast<uint32_t>(hdr.token_ids_size()) != l.num_tokens()) {
    return absl::InvalidArgumentError(absl::StrFormat("PutChunk: %d token ids for num_tokens %d",
                                                      hdr.token_ids_size(), l.num_tokens()));
  }
  layer_bytes_ = static_cast<size_t>(l.num_kv_heads()) * l.num_tokens() * l.head_dim() *
                 kernels::DTypeSize(dt);
  if (layer_bytes_ > kvstore::kMaxLayerPayloadBytes / 2) {
    return absl::InvalidArgumentError("PutChunk: layer payload over the record limit");
  }
  kvstore::KvChunkHeader& h = chunk_header_;
  ASSIGN_OR_RETURN(h.fingerprint, wire::FingerprintFromBytes(l.model_fingerprint()));
  h.tokens.assign(hdr.token_ids().begin(), hdr.token_ids().end());
  ASSIGN_OR_RETURN(h.key, ParseChunkKey(hdr.key()));
  if (h.key != kvstore::ChunkKey::Of(h.fingerprint, h.tokens)) {
    return absl::InvalidArgumentError(
        "PutChunk: key is not ChunkKey::Of(fingerprint, token_ids) (docs/kv_format.md)");
  }
  if (options_.expect != nullptr) {
    RETURN_IF_ERROR(CheckExpectedLayout(l, h.fingerprint, *options_.expect));
  }
  const uint64_t declared = uint64_t{l.num_layers()} * 2 * layer_bytes_;
  if (options_.max_chunk_bytes > 0 && declared > options_.max_chunk_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "PutChunk: the header declares %d bytes of K/V, over the per-stream limit of %d",
        declared, options_.max_chunk_bytes));
  }
  if (options_.budget != nullptr) {
    ASSIGN_OR_RETURN(reservation_, options_.budget->TryReserve(declared, "PutChunk"));
  }
  h.dtype = dt;
  h.codec = kvstore::Codec::kRaw;
  h.compression = kvstore::Compression::kNone;
  h.num_layers = l.num_layers();
  h.num_kv_heads = l.num_kv_heads();
  h.head_dim = l.head_dim();
  ASSIGN_OR_RETURN(chunk_.header, kvstore::EncodeHeader(&h));
  header_ = std::move(hdr);
  have_header_ = true;
  return absl::OkStatus();
}

absl::Status PutChunkAssembler::AddLayer(const v1::LayerKV& kv) {
  const size_t done = layers_done_;
  if (kv.layer() != done || kv.layer() >= header_.layout().num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PutChunk: got layer %d, expected %d", kv.layer(), done));
  }
  if (kv.k().size() != layer_bytes_ || kv.v().size() != layer_bytes_) {
    return absl::InvalidArgumentError(absl::StrFormat("PutChunk: layer %d has %d/%d bytes, expected %d",
                                                      kv.layer(), kv.k().size(), kv.v().size(),
                                                      layer_bytes_));
  }
  if (kv.checksum() != wire::LayerChecksum(kv.k(), kv.v())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PutChunk: layer %d checksum mismatch", kv.layer()));
  }
  const kvstore::KvChunkHeader& h = chunk_header_;
  RETURN_IF_ERROR(CheckFiniteKv(kv.k(), h.dtype, absl::StrFormat("PutChunk: layer %d K", kv.layer())));
  RETURN_IF_ERROR(CheckFiniteKv(kv.v(), h.dtype, absl::StrFormat("PutChunk: layer %d V", kv.layer())));
  const int64_t H = h.num_kv_heads, T = h.num_tokens(), D = h.head_dim;
  auto k = kernels::TensorView::Contiguous(kv.k().data(), h.dtype, {H, T, D});
  auto v = kernels::TensorView::Contiguous(kv.v().data(), h.dtype, {H, T, D});
  ASSIGN_OR_RETURN(std::string rec, kvstore::EncodeLayer(h, kv.layer(), k, v));
  ++layers_done_;
  if (sink_) return sink_(kv.layer(), std::move(rec));
  chunk_.layers.push_back(std::move(rec));
  return absl::OkStatus();
}

absl::StatusOr<kvstore::KvChunkHeader> PutChunkAssembler::Finish() const {
  if (!have_header_) return absl::InvalidArgumentError("PutChunk: no header");
  if (layers_done_ != chunk_header_.num_layers) {
    return absl::InvalidArgumentError(absl::StrFormat("PutChunk: stream ended after %d of %d layers",
                                                      layers_done_,
                                                      chunk_header_.num_layers));
  }
  return chunk_header_;
}

absl::StatusOr<kvstore::EncodedChunk> PutChunkAssembler::Encode() const {
  RETURN_IF_ERROR(Finish().status());
  if (sink_) return absl::FailedPreconditionError("PutChunk: the layers went to a sink");
  return chunk_;
}

absl::StatusOr<kvstore::EncodedChunk> PutChunkAssembler::Take() {
  RETURN_IF_ERROR(Finish().status());
  if (sink_) return absl::FailedPreconditionError("PutChunk: the layers went to a sink");
  return std::move(chunk_);
}

// ---- Blend ----

absl::Status ValidateBlendOptions(const v1::BlendOptions& opts) {
  const float r = opts.recompute_ratio();
  if (!std::isfinite(r) || r < 0 || r > 1) {
    return absl::InvalidArgumentError(absl::StrFormat("recompute_ratio %g outside [0, 1]", r));
  }
  if (!v1::BlendMode_IsValid(opts.mode())) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown blend mode %d", opts.mode()));
  }
  if (opts.output_dtype() != v1::DTYPE_UNSPECIFIED) {
    RETURN_IF_ERROR(wire::KernelDTypeFromProto(opts.output_dtype()).status());
  }
  if (opts.lookahead_layers() > blend::kMaxLookaheadLayers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lookahead_layers %d above %d", opts.lookahead_layers(), blend::kMaxLookaheadLayers));
  }
  if (opts.chunk_head_tokens() > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chunk_head_tokens %d above 64", opts.chunk_head_tokens()));
  }
  const float m = opts.adaptive_mass();
  if (!std::isfinite(m) || m < 0 || m > 1) {
    return absl::InvalidArgumentError(absl::StrFormat("adaptive_mass %g outside [0, 1]", m));
  }
  const float t = opts.adaptive_threshold();
  if (!std::isfinite(t) || t < 0 || t > 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("adaptive_threshold %g outside [0, 1]", t));
  }
  const float b = opts.adaptive_budget();
  if (!std::isfinite(b) || b < 0 || b > 1) {
    return absl::InvalidArgumentError(absl::StrFormat("adaptive_budget %g outside [0, 1]", b));
  }
  blend::Selector s;
  if (!opts.selector().empty() && !blend::ParseSelector(opts.selector(), &s)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "selector '%s' unknown (lookahead-deviation, attended-deviation, deviation, "
        "deviation+attention, query-attention, chunk-head)",
        opts.selector()));
  }
  return absl::OkStatus();
}

// ValidateRawPrompt: non-empty ids in the vocabulary, query_tokens inside
// them, no add_bos.
absl::Status ValidateRawPrompt(const v1::BlendRequest& req, int vocab_size) {
  const v1::RawPrompt& raw = req.raw();
  if (!req.segments().empty()) {
    return absl::InvalidArgumentError("give segments or a raw prompt, not both");
  }
  if (raw.ids().empty()) return absl::InvalidArgumentError("the raw prompt is empty");
  if (raw.query_tokens() > static_cast<uint32_t>(raw.ids_size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "raw prompt: query_tokens %d exceeds its %d ids", raw.query_tokens(), raw.ids_size()));
  }
  if (req.options().add_bos()) {
    return absl::InvalidArgumentError("add_bos with a raw prompt: put the BOS in its ids");
  }
  RETURN_IF_ERROR(CheckTokenIds(raw.ids(), vocab_size, "raw prompt"));
  return ValidateBlendOptions(req.options());
}

absl::Status ValidateBlendRequest(const v1::BlendRequest& req, int vocab_size) {
  if (req.has_raw()) return ValidateRawPrompt(req, vocab_size);
  if (req.segments().empty()) return absl::InvalidArgumentError("no segments");
  if (req.segments_size() > kMaxBlendSegments) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d segments (max %d)", req.segments_size(), kMaxBlendSegments));
  }
  for (int i = 0; i < req.segments_size(); ++i) {
    const v1::Segment& s = req.segments(i);
    switch (s.source_case()) {
      case v1::Segment::kChunkId:
        break;
      case v1::Segment::kTokens:
        if (s.tokens().ids().empty()) {
          return absl::InvalidArgumentError(absl::StrFormat("segment %d is empty", i));
        }
        RETURN_IF_ERROR(
            CheckTokenIds(s.tokens().ids(), vocab_size, absl::StrFormat("segment %d", i)));
        break;
      case v1::Segment::kText:
        if (s.text().empty()) {
          return absl::InvalidArgumentError(absl::StrFormat("segment %d is empty", i));
        }
        break;
      default:
        return absl::InvalidArgumentError(absl::StrFormat("segment %d has no source", i));
    }
  }
  if (req.segments(req.segments_size() - 1).source_case() == v1::Segment::kChunkId) {
    return absl::InvalidArgumentError("the last segment must be the query (tokens or text)");
  }
  return ValidateBlendOptions(req.options());
}

absl::Status ValidateRetrieveAndBlendRequest(const v1::RetrieveAndBlendRequest& req) {
  if (req.query().empty()) return absl::InvalidArgumentError("empty query");
  if (req.k() < 1 || req.k() > kMaxRetrieveTopK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("k = %d out of range [1, %d]", req.k(), kMaxRetrieveTopK));
  }
  return ValidateBlendOptions(req.options());
}

// ---- Retrieval ----

absl::Status ValidateIngestDocument(const v1::IngestDocumentsRequest& req) {
  return ValidateWireDocument(req.document());
}

absl::Status ValidateWireDocument(const v1::Document& d) {
  if (d.doc_id().empty()) return absl::InvalidArgumentError("document with an empty doc_id");
  if (d.doc_id().size() > kMaxDocIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("doc_id %s over %d bytes",
                                                      Quoted(d.doc_id()), kMaxDocIdBytes));
  }
  if (d.text().empty()) {
    return absl::InvalidArgumentError("document " + Quoted(d.doc_id()) + " has empty text");
  }
  for (int i = 0; i < d.chunk_vectors_size(); ++i) {
    const auto& values = d.chunk_vectors(i).values();
    if (values.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("document %s: chunk_vectors[%d] is empty", Quoted(d.doc_id()), i));
    }
    for (float v : values) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "document %s: chunk_vectors[%d] has a non-finite value", Quoted(d.doc_id()), i));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateChunkDocumentsRequest(const v1::ChunkDocumentsRequest& req) {
  if (req.documents_size() == 0) return absl::InvalidArgumentError("ChunkDocuments: no documents");
  if (static_cast<size_t>(req.documents_size()) > kMaxChunkDocuments) {
    return absl::InvalidArgumentError(absl::StrFormat("ChunkDocuments: %d documents (max %d)",
                                                      req.documents_size(), kMaxChunkDocuments));
  }
  for (const v1::Document& d : req.documents()) RETURN_IF_ERROR(ValidateWireDocument(d));
  return absl::OkStatus();
}

absl::Status ValidateStartJobRequest(const v1::StartJobRequest& req) {
  const v1::CorpusSpec& c = req.corpus();
  if (c.paths_size() == 0) return absl::InvalidArgumentError("StartJob: no corpus paths");
  if (c.paths_size() > kMaxJobPaths) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StartJob: %d corpus paths (max %d)", c.paths_size(), kMaxJobPaths));
  }
  for (const std::string& p : c.paths()) {
    if (p.empty() || p.size() > kMaxPathBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "StartJob: corpus path %s is empty or over %d bytes", Quoted(p), kMaxPathBytes));
    }
  }
  if (req.workers() > kMaxJobWorkers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StartJob: %d workers (max %d)", req.workers(), kMaxJobWorkers));
  }
  if (c.shard_count() > 1 && c.shard_index() >= c.shard_count()) {
    return absl::InvalidArgumentError(absl::StrFormat("StartJob: shard %d of %d",
                                                      c.shard_index(), c.shard_count()));
  }
  if (c.neighbours() > kMaxJobNeighbours) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StartJob: neighbours %d (max %d)", c.neighbours(), kMaxJobNeighbours));
  }
  return absl::OkStatus();
}

absl::Status ValidateDeleteDocumentRequest(const v1::DeleteDocumentRequest& req) {
  if (req.doc_id().empty()) return absl::InvalidArgumentError("empty doc_id");
  if (req.doc_id().size() > kMaxDocIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("doc_id %s over %d bytes",
                                                      Quoted(req.doc_id()), kMaxDocIdBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateSearchRequest(const v1::SearchRequest& req) {
  if (req.k() == 0 || req.k() > kMaxSearchTopK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("k = %d out of range [1, %d]", req.k(), kMaxSearchTopK));
  }
  if (req.has_vector()) {
    if (req.vector().values().empty()) return absl::InvalidArgumentError("empty query vector");
    for (float v : req.vector().values()) {
      if (!std::isfinite(v)) return absl::InvalidArgumentError("query vector has a non-finite value");
    }
    return absl::OkStatus();
  }
  if (req.text().empty()) return absl::InvalidArgumentError("empty query (set text or vector)");
  if (!v1::SearchMode_IsValid(req.mode())) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown search mode %d", req.mode()));
  }
  return absl::OkStatus();
}

absl::Status ValidateGetChunksRequest(const v1::GetChunksRequest& req) {
  if (req.chunk_ids_size() > kMaxChunkIdsPerCall) {
    return absl::InvalidArgumentError(
        absl::StrFormat("over %d chunk ids", kMaxChunkIdsPerCall));
  }
  if (req.doc_ids_size() > kMaxChunkIdsPerCall) {
    return absl::InvalidArgumentError(absl::StrFormat("over %d doc ids", kMaxChunkIdsPerCall));
  }
  for (const std::string& d : req.doc_ids()) {
    if (d.empty()) return absl::InvalidArgumentError("an empty doc id");
  }
  return absl::OkStatus();
}

// ---- Engine ----

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& req, int vocab_size,
                                     int context) {
  if (req.question().empty() && req.question_tokens().empty()) {
    return absl::InvalidArgumentError("empty question");
  }
  const int64_t new_tokens = req.max_new_tokens() > 0 ? req.max_new_tokens() : 32;
  if (context > 0 && req.question_tokens_size() + new_tokens > context) {
    return absl::OutOfRangeError(absl::StrFormat(
        "question_tokens (%d) + max_new_tokens (%d) exceed the model context of %d",
        req.question_tokens_size(), new_tokens, context));
  }
  RETURN_IF_ERROR(CheckTokenIds(req.question_tokens(), vocab_size, "question_tokens"));
  if (req.k() > kMaxRetrieveTopK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("k = %d out of range [0, %d]", req.k(), kMaxRetrieveTopK));
  }
  if (req.chunk_ids_size() > kMaxChunkIdsPerCall) {
    return absl::InvalidArgumentError(absl::StrFormat("over %d chunk ids", kMaxChunkIdsPerCall));
  }
  if (req.max_new_tokens() > kMaxGenerateNewTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_new_tokens %d > %d", req.max_new_tokens(), kMaxGenerateNewTokens));
  }
  return ValidateBlendOptions(req.blend());
}

}  // namespace ragkv::services::internal
