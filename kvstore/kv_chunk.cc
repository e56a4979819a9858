#include "kvstore/kv_chunk.h"

#include <bit>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/convert.h"
#include "kernels/quant.h"
#include "kvstore/internal/kv_codec.h"
#include "kvstore/internal/xxh3_fast.h"
#include "xxhash.h"
#include "zstd.h"

namespace ragkv::kvstore {
namespace {

using kernels::DType;
using kernels::TensorView;

constexpr char kHeaderMagic[4] = {'R', 'K', 'V', 'H'};
constexpr char kLayerMagic[4] = {'R', 'K', 'V', 'L'};
constexpr size_t kLayerChecksumOffset = 56;

static_assert(std::endian::native == std::endian::little,
              "kv_chunk.cc assumes a little-endian host (the format is little-endian)");

template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool KnownDType(uint8_t d) {
  return d == static_cast<uint8_t>(DType::kF32) || d == static_cast<uint8_t>(DType::kF16) ||
         d == static_cast<uint8_t>(DType::kBF16);
}
bool KnownCodec(uint8_t c) { return c <= static_cast<uint8_t>(Codec::kInt4Grouped); }
bool KnownCompression(uint8_t c) { return c <= static_cast<uint8_t>(Compression::kZstd); }

uint64_t LayerChecksum(const char* prefix, std::string_view payload) {
  return internal::Xxh3_64(prefix, kLayerChecksumOffset, payload.data(), payload.size());
}

absl::Status CheckLayerInput(const KvChunkHeader& h, TensorView t, const char* which) {
  if (t.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(which, ": null data"));
  if (!KnownDType(static_cast<uint8_t>(t.dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, ": dtype must be f32, f16 or bf16, got ", kernels::DTypeName(t.dtype)));
  }
  if (!t.IsContiguous() || t.numel() != static_cast<int64_t>(h.LayerElements())) {
    return absl::InvalidArgumentError(absl::StrCat(
        which, ": expected contiguous [", h.num_kv_heads, ",", h.num_tokens(), ",", h.head_dim,
        "], got ", t.DebugString()));
  }
  return absl::OkStatus();
}

// ToF32: returns `t` as f32 data (t itself if already f32, else converted into *buf).
absl::StatusOr<const float*> ToF32(TensorView t, std::vector<float>* buf) {
  if (t.dtype == DType::kF32) return static_cast<const float*>(t.data);
  buf->resize(static_cast<size_t>(t.numel()));
  RETURN_IF_ERROR(kernels::Convert(t, TensorView::Contiguous(buf->data(), DType::kF32, {t.numel()})));
  return buf->data();
}

// WriteRawPayload: the uncompressed payload of one layer into `out`
// (RawPayloadBytes() bytes).
absl::Status WriteRawPayload(const KvChunkHeader& h, TensorView k, TensorView v, char* out) {
  const int64_t n = static_cast<int64_t>(h.LayerElements());
  if (h.codec == Codec::kRaw) {
    const size_t bytes = static_cast<size_t>(n) * kernels::DTypeSize(h.dtype);
    TensorView ks = TensorView::Contiguous(k.data, k.dtype, {n});
    TensorView vs = TensorView::Contiguous(v.data, v.dtype, {n});
    RETURN_IF_ERROR(kernels::Convert(ks, TensorView::Contiguous(out, h.dtype, {n})));
    RETURN_IF_ERROR(kernels::Convert(vs, TensorView::Contiguous(out + bytes, h.dtype, {n})));
    return absl::OkStatus();
  }
  std::vector<float> kbuf, vbuf;
  ASSIGN_OR_RETURN(const float* kf, ToF32(k, &kbuf));
  ASSIGN_OR_RETURN(const float* vf, ToF32(v, &vbuf));
  return internal::EncodeQuantized(h, kf, vf, out);
}

// ConvertRows: contiguous [H, T, D] elements of `dtype` at `src` into the f32
// view `dst` of that shape (unit last stride): one Convert per head when its
// rows are dense, else one per row.
absl::Status ConvertRows(const char* src, DType dtype, TensorView dst) {
  const int64_t H = dst.shape[0], T = dst.shape[1], D = dst.shape[2];
  const size_t esize = kernels::DTypeSize(dtype);
  const bool dense_rows = T <= 1 || dst.stride[1] == D;
  const int64_t run = dense_rows ? T * D : D;
  for (int64_t hh = 0; hh < H; ++hh) {
    for (int64_t t = 0; t < (dense_rows ? 1 : T); ++t) {
      const char* s = src + static_cast<size_t>((hh * T + t) * D) * esize;
      float* d = dst.as<float>() + hh * dst.stride[0] + t * dst.stride[1];
      RETURN_IF_ERROR(kernels::Convert(TensorView::Contiguous(s, dtype, {run}),
                                       TensorView::Contiguous(d, DType::kF32, {run})));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* CodecName(Codec c) {
  switch (c) {
    case Codec::kRaw: return "raw";
    case Codec::kInt8PerChannel: return "int8";
    case Codec::kFp8E4M3PerHead: return "fp8";
    case Codec::kInt4Grouped: return "int4";
  }
  return "unknown";
}

absl::StatusOr<Codec> ParseCodec(std::string_view name) {
  for (Codec c : {Codec::kRaw, Codec::kInt8PerChannel, Codec::kFp8E4M3PerHead, Codec::kInt4Grouped}) {
    if (name == CodecName(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kv codec \"", absl::string_view(name.data(), name.size()),
                   "\" (want raw, int8, fp8 or int4)"));
}

const char* CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kZstd: return "zstd";
  }
  return "unknown";
}

uint64_t KvChunkHeader::RawPayloadBytes() const {
  if (codec != Codec::kRaw) return internal::QuantPayloadBytes(*this);
  return 2 * LayerElements() * kernels::DTypeSize(dtype);
}

uint64_t KvChunkHeader::UncompressedBytes() const {
  return kHeaderFixedBytes + 4 * uint64_t{num_tokens()} + kHeaderChecksumBytes +
         uint64_t{num_layers} * (kLayerPrefixBytes + RawPayloadBytes());
}

size_t EncodedChunk::TotalBytes() const {
  size_t n = header.size();
  for (const std::string& l : layers) n += l.size();
  return n;
}

const char* RecordContextName(RecordContext c) {
  switch (c) {
    case RecordContext::kChunkLocal:
      return "chunk-local";
    case RecordContext::kNeighbours:
      return "neighbours";
  }
  return "unknown";
}

absl::Status CheckRecordContext(const KvChunkHeader& h, RecordContext expected) {
  if (h.context == expected) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "kv record ", h.key.ToHex(), ": a ", RecordContextName(h.context), " record (first position ",
      h.first_position, "), requested as a ", RecordContextName(expected),
      " one: a record computed in another context is never served in its place"));
}

absl::Status ValidateHeader(const KvChunkHeader& h) {
  if (h.version != kKvFormatVersion) {
    return absl::UnimplementedError(absl::StrCat("kv format version ", h.version,
                                                 " unsupported (this build reads ",
                                                 kKvFormatVersion, ")"));
  }
  if (!KnownDType(static_cast<uint8_t>(h.dtype))) {
    return absl::UnimplementedError(
        absl::StrCat("kv dtype ", static_cast<int>(h.dtype), " unsupported (f32/f16/bf16)"));
  }
  if (!KnownCodec(static_cast<uint8_t>(h.codec))) {
    return absl::UnimplementedError(absl::StrCat("kv codec ", static_cast<int>(h.codec), " unknown"));
  }
  if (!KnownCompression(static_cast<uint8_t>(h.compression))) {
    return absl::UnimplementedError(
        absl::StrCat("kv compression ", static_cast<int>(h.compression), " unknown"));
  }
  if (h.num_layers == 0 || h.num_layers > kMaxLayers || h.num_kv_heads == 0 ||
      h.num_kv_heads > kMaxKvHeads || h.head_dim == 0 || h.head_dim > kMaxHeadDim ||
      h.tokens.empty() || h.tokens.size() > kMaxTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv shape out of range: layers=", h.num_layers, " kv_heads=", h.num_kv_heads,
        " head_dim=", h.head_dim, " tokens=", h.tokens.size(), " (limits ", kMaxLayers, "/",
        kMaxKvHeads, "/", kMaxHeadDim, "/", kMaxTokens, ", all > 0)"));
  }
  if (h.context != RecordContext::kChunkLocal && h.context != RecordContext::kNeighbours) {
    return absl::UnimplementedError(
        absl::StrCat("kv record context ", static_cast<int>(h.context), " unknown"));
  }
  if (h.context == RecordContext::kChunkLocal ? h.first_position != 0
                                              : (h.first_position == 0 ||
                                                 h.first_position > kMaxTokens)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv record: first position ", h.first_position, " invalid for a ",
        RecordContextName(h.context), " record (chunk-local: 0; neighbours: 1..", kMaxTokens,
        ")"));
  }
  if (h.RawPayloadBytes() > kMaxLayerPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("kv layer payload of ", h.RawPayloadBytes(),
                                                   " bytes exceeds the ", kMaxLayerPayloadBytes,
                                                   "-byte limit"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeHeader(KvChunkHeader* h) {
  RETURN_IF_ERROR(ValidateHeader(*h));
  const size_t body = kHeaderFixedBytes + 4 * h->tokens.size();
  std::string out(body + kHeaderChecksumBytes, '\0');
  char* p = out.data();
  std::memcpy(p, kHeaderMagic, 4);
  Store<uint16_t>(p + 4, h->version);
  p[6] = static_cast<char>(h->dtype);
  p[7] = static_cast<char>(h->codec);
  p[8] = static_cast<char>(h->compression);
  p[9] = static_cast<char>(h->context);
  Store<uint32_t>(p + 12, h->num_tokens());
  std::memcpy(p + kHeaderFingerprintOffset, h->fingerprint.data(), 16);
  std::memcpy(p + 32, h->key.bytes.data(), 16);
  Store<uint32_t>(p + 48, h->num_layers);
  Store<uint32_t>(p + 52, h->num_kv_heads);
  Store<uint32_t>(p + 56, h->head_dim);
  Store<uint32_t>(p + 60, h->first_position);
  std::memcpy(p + kHeaderFixedBytes, h->tokens.data(), 4 * h->tokens.size());
  h->digest = internal::Xxh3_64(p, body, nullptr, 0);
  Store<uint64_t>(p + body, h->digest);
  return out;
}

absl::StatusOr<KvChunkHeader> DecodeHeader(std::string_view blob) {
  if (blob.size() < kHeaderFixedBytes + kHeaderChecksumBytes) {
    return absl::DataLossError(absl::StrCat("kv header truncated: ", blob.size(), " bytes"));
  }
  const char* p = blob.data();
  if (std::memcmp(p, kHeaderMagic, 4) != 0) return absl::DataLossError("kv header: bad magic");
  const uint32_t num_tokens = Load<uint32_t>(p + 12);
  if (num_tokens == 0 || num_tokens > kMaxTokens) {
    return absl::DataLossError(absl::StrCat("kv header: token count ", num_tokens, " out of range"));
  }
  const size_t body = kHeaderFixedBytes + 4 * size_t{num_tokens};
  if (blob.size() != body + kHeaderChecksumBytes) {
    return absl::DataLossError(absl::StrCat("kv header: size ", blob.size(), " != expected ",
                                            body + kHeaderChecksumBytes, " (truncated or padded)"));
  }
  const uint64_t stored = Load<uint64_t>(p + body);
  const uint64_t actual = internal::Xxh3_64(p, body, nullptr, 0);
  if (stored != actual) return absl::DataLossError("kv header: checksum mismatch");
  KvChunkHeader h;
  h.version = Load<uint16_t>(p + 4);
  h.dtype = static_cast<DType>(static_cast<uint8_t>(p[6]));
  h.codec = static_cast<Codec>(static_cast<uint8_t>(p[7]));
  h.compression = static_cast<Compression>(static_cast<uint8_t>(p[8]));
  std::memcpy(h.fingerprint.data(), p + kHeaderFingerprintOffset, 16);
  std::memcpy(h.key.bytes.data(), p + 32, 16);
  h.num_layers = Load<uint32_t>(p + 48);
  h.num_kv_heads = Load<uint32_t>(p + 52);
  h.head_dim = Load<uint32_t>(p + 56);
  h.context = static_cast<RecordContext>(static_cast<uint8_t>(p[9]));
  h.first_position = Load<uint32_t>(p + 60);
  h.tokens.resize(num_tokens);
  std::memcpy(h.tokens.data(), p + kHeaderFixedBytes, 4 * size_t{num_tokens});
  h.digest = stored;
  // Unknown versions / contexts: Unimplemented; a context with an invalid
  // first position is damage (DataLoss), not a caller's mistake.
  if (absl::Status s = ValidateHeader(h); !s.ok()) {
    if (s.code() == absl::StatusCode::kInvalidArgument) return absl::DataLossError(s.message());
    return s;
  }
  // Reserved bytes (10, 11) are zero in format version 1, so a decoded
  // header re-encodes to the same bytes (found by fuzz/kv_record_fuzzer).
  for (size_t i : {10u, 11u}) {
    if (p[i] != 0) {
      return absl::DataLossError(absl::StrCat("kv header: reserved byte ", i, " is not zero"));
    }
  }
  return h;
}

absl::StatusOr<Fingerprint> PeekFingerprint(std::string_view blob) {
  if (blob.size() < kHeaderFixedBytes || std::memcmp(blob.data(), kHeaderMagic, 4) != 0) {
    return absl::DataLossError("kv header: truncated or bad magic");
  }
  Fingerprint fp;
  std::memcpy(fp.data(), blob.data() + kHeaderFingerprintOffset, 16);
  return fp;
}

absl::StatusOr<uint32_t> PeekNumLayers(std::string_view blob) {
  if (blob.size() < kHeaderFixedBytes || std::memcmp(blob.data(), kHeaderMagic, 4) != 0) {
    return absl::DataLossError("kv header: truncated or bad magic");
  }
  return Load<uint32_t>(blob.data() + 48);
}

absl::StatusOr<std::string> EncodeLayer(const KvChunkHeader& h, uint32_t layer, TensorView k,
                                        TensorView v, const EncodeOptions& options) {
  RETURN_IF_ERROR(ValidateHeader(h));
  if (h.digest == 0) {
    return absl::FailedPreconditionError("EncodeLayer: header digest unset (call EncodeHeader first)");
  }
  if (layer >= h.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeLayer: layer ", layer, " >= num_layers ", h.num_layers));
  }
  RETURN_IF_ERROR(CheckLayerInput(h, k, "k"));
  RETURN_IF_ERROR(CheckLayerInput(h, v, "v"));
  const uint64_t raw_bytes = h.RawPayloadBytes();
  std::string out;
  if (h.compression == Compression::kNone) {
    out.resize(kLayerPrefixBytes + raw_bytes);
    RETURN_IF_ERROR(WriteRawPayload(h, k, v, out.data() + kLayerPrefixBytes));
  } else {
    std::string raw(raw_bytes, '\0');
    RETURN_IF_ERROR(WriteRawPayload(h, k, v, raw.data()));
    const size_t bound = ZSTD_compressBound(raw.size());
    out.resize(kLayerPrefixBytes + bound);
    const size_t n = ZSTD_compress(out.data() + kLayerPrefixBytes, bound, raw.data(), raw.size(),
                                   options.zstd_level);
    if (ZSTD_isError(n)) {
      return absl::InternalError(absl::StrCat("zstd compress: ", ZSTD_getErrorName(n)));
    }
    out.resize(kLayerPrefixBytes + n);
  }
  char* p = out.data();
  std::memset(p, 0, kLayerPrefixBytes);
  std::memcpy(p, kLayerMagic, 4);
  Store<uint16_t>(p + 4, h.version);
  p[6] = static_cast<char>(h.codec);
  p[7] = static_cast<char>(h.compression);
  Store<uint32_t>(p + 8, layer);
  Store<uint64_t>(p + 16, h.digest);
  Store<uint64_t>(p + 24, raw_bytes);
  Store<uint64_t>(p + 32, out.size() - kLayerPrefixBytes);
  Store<uint64_t>(p + kLayerChecksumOffset,
                  LayerChecksum(p, std::string_view(out).substr(kLayerPrefixBytes)));
  return out;
}

absl::StatusOr<LayerRecordView> ParseLayerRecord(const KvChunkHeader& h, std::string_view blob,
                                                 uint32_t expected_layer) {
  if (blob.size() < kLayerPrefixBytes) {
    return absl::DataLossError(absl::StrCat("kv layer record truncated: ", blob.size(), " bytes"));
  }
  const char* p = blob.data();
  if (std::memcmp(p, kLayerMagic, 4) != 0) return absl::DataLossError("kv layer record: bad magic");
  const uint16_t version = Load<uint16_t>(p + 4);
  if (version != kKvFormatVersion) {
    return absl::UnimplementedError(absl::StrCat("kv layer record version ", version, " unsupported"));
  }
  const uint64_t stored_bytes = Load<uint64_t>(p + 32);
  if (stored_bytes != blob.size() - kLayerPrefixBytes) {
    return absl::DataLossError(absl::StrCat("kv layer record: payload size ", stored_bytes,
                                            " != ", blob.size() - kLayerPrefixBytes,
                                            " bytes present (truncated)"));
  }
  const std::string_view payload = blob.substr(kLayerPrefixBytes);
  if (Load<uint64_t>(p + kLayerChecksumOffset) != LayerChecksum(p, payload)) {
    return absl::DataLossError("kv layer record: checksum mismatch");
  }
  LayerRecordView r;
  r.layer = Load<uint32_t>(p + 8);
  r.codec = static_cast<Codec>(static_cast<uint8_t>(p[6]));
  r.compression = static_cast<Compression>(static_cast<uint8_t>(p[7]));
  r.raw_payload_bytes = Load<uint64_t>(p + 24);
  r.stored_payload = payload;
  if (Load<uint64_t>(p + 16) != h.digest) {
    return absl::DataLossError("kv layer record: bound to a different header (digest mismatch)");
  }
  if (r.layer != expected_layer) {
    return absl::DataLossError(
        absl::StrCat("kv layer record: is layer ", r.layer, ", expected ", expected_layer));
  }
  if (r.codec != h.codec || r.compression != h.compression ||
      r.raw_payload_bytes != h.RawPayloadBytes()) {
    return absl::DataLossError("kv layer record: codec/size disagree with the header");
  }
  if (r.compression == Compression::kNone && stored_bytes != r.raw_payload_bytes) {
    return absl::DataLossError("kv layer record: uncompressed payload has the wrong size");
  }
  return r;
}

absl::Status DecodeLayerToF32(const KvChunkHeader& h, std::string_view blob, uint32_t layer,
                              float* k_out, float* v_out) {
  const int64_t H = h.num_kv_heads, T = h.num_tokens(), D = h.head_dim;
  return DecodeLayerInto(h, blob, layer, TensorView::Contiguous(k_out, DType::kF32, {H, T, D}),
                         TensorView::Contiguous(v_out, DType::kF32, {H, T, D}));
}

absl::Status DecodeLayerInto(const KvChunkHeader& h, std::string_view blob, uint32_t layer,
                             TensorView dst_k, TensorView dst_v) {
  const int64_t H = h.num_kv_heads, T = h.num_tokens(), D = h.head_dim;
  for (const TensorView* d : {&dst_k, &dst_v}) {
    if (d->rank != 3 || d->dtype != DType::kF32 || d->shape[0] != H || d->shape[1] != T ||
        d->shape[2] != D || (D > 1 && d->stride[2] != 1) || d->data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("DecodeLayerInto: want f32 [", H, ",", T, ",",
                                                     D, "] with unit last stride, got ",
                                                     d->DebugString()));
    }
  }
  ASSIGN_OR_RETURN(LayerRecordView r, ParseLayerRecord(h, blob, layer));
  std::string decompressed;
  std::string_view raw = r.stored_payload;
  if (r.compression == Compression::kZstd) {
    decompressed.resize(r.raw_payload_bytes);
    const size_t n = ZSTD_decompress(decompressed.data(), decompressed.size(),
                                     r.stored_payload.data(), r.stored_payload.size());
    if (ZSTD_isError(n) || n != r.raw_payload_bytes) {
      return absl::DataLossError(absl::StrCat(
          "kv layer record: zstd payload does not decompress to ", r.raw_payload_bytes, " bytes",
          ZSTD_isError(n) ? absl::StrCat(" (", ZSTD_getErrorName(n), ")") : std::string()));
    }
    raw = decompressed;
  }
  const int64_t n = H * T * D;
  if (h.codec == Codec::kRaw) {
    const size_t bytes = static_cast<size_t>(n) * kernels::DTypeSize(h.dtype);
    RETURN_IF_ERROR(ConvertRows(raw.data(), h.dtype, dst_k));
    return ConvertRows(raw.data() + bytes, h.dtype, dst_v);
  }
  return internal::DecodeQuantized(h, raw, dst_k, dst_v);
}

absl::StatusOr<RawLayer> RawLayerViews(const KvChunkHeader& h, std::string_view blob,
                                       uint32_t layer) {
  if (h.codec != Codec::kRaw || h.compression != Compression::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RawLayerViews: zero-copy views need codec raw without compression (chunk is ",
        CodecName(h.codec), "/", CompressionName(h.compression), ")"));
  }
  ASSIGN_OR_RETURN(LayerRecordView r, ParseLayerRecord(h, blob, layer));
  const int64_t H = h.num_kv_heads, T = h.num_tokens(), D = h.head_dim;
  const size_t bytes = static_cast<size_t>(H * T * D) * kernels::DTypeSize(h.dtype);
  RawLayer out;
  out.k = TensorView::Contiguous(r.stored_payload.data(), h.dtype, {H, T, D});
  out.v = TensorView::Contiguous(r.stored_payload.data() + bytes, h.dtype, {H, T, D});
  return out;
}

absl::StatusOr<EncodedChunk> EncodeChunk(KvChunkHeader* header,
                                         const std::vector<TensorView>& layer_k,
                                         const std::vector<TensorView>& layer_v,
                                         const EncodeOptions& options) {
  if (layer_k.size() != header->num_layers || layer_v.size() != header->num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("EncodeChunk: ", layer_k.size(), " K and ",
                                                   layer_v.size(), " V layers for num_layers ",
                                                   header->num_layers));
  }
  EncodedChunk out;
  ASSIGN_OR_RETURN(out.header, EncodeHeader(header));
  out.layers.reserve(header->num_layers);
  for (uint32_t i = 0; i < header->num_layers; ++i) {
    ASSIGN_OR_RETURN(std::string rec, EncodeLayer(*header, i, layer_k[i], layer_v[i], options));
    out.layers.push_back(std::move(rec));
  }
  return out;
}

}  // namespace ragkv::kvstore
