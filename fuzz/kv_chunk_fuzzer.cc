// kv_chunk_fuzzer: the KVChunk codec (kvstore/kv_chunk.h) on untrusted bytes:
// DecodeHeader, PeekFingerprint/PeekNumLayers, ParseLayerRecord and
// DecodeLayerToF32, ChunkKey::FromHex/FromBytes.
// Input: [mode][u16 header_len][header blob][layer record blob].
// mode bit 0: recompute the XXH3 checksums first, so mutations reach the
// field checks behind them (otherwise nearly every input stops at the
// checksum); bits 1-2: expected layer index.
// Invariant checked: a header that decodes re-encodes to the same bytes
// (outside the reserved bytes) and decodes again to the same fields.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "kernels/tensor.h"
#include "kvstore/chunk_key.h"
#include "kvstore/internal/xxh3_fast.h"
#include "kvstore/kv_chunk.h"

namespace {

using ragkv::kernels::DType;
using ragkv::kernels::TensorView;
namespace kv = ragkv::kvstore;

void FixHeaderChecksum(std::string* h) {
  if (h->size() < kv::kHeaderFixedBytes + kv::kHeaderChecksumBytes) return;
  const size_t body = h->size() - kv::kHeaderChecksumBytes;
  const uint64_t sum = kv::internal::Xxh3_64(h->data(), body, nullptr, 0);
  std::memcpy(h->data() + body, &sum, 8);
}

void FixLayerChecksum(std::string* r) {
  constexpr size_t kChecksumOffset = 56;  // docs/kv_format.md, layer prefix
  if (r->size() < kv::kLayerPrefixBytes) return;
  const uint64_t sum = kv::internal::Xxh3_64(r->data(), kChecksumOffset,
                                             r->data() + kv::kLayerPrefixBytes,
                                             r->size() - kv::kLayerPrefixBytes);
  std::memcpy(r->data() + kChecksumOffset, &sum, 8);
}

// WriteSeeds: valid small chunks in every codec/compression/dtype.
void WriteSeeds(const std::string& dir) {
  int n = 0;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (kv::Codec codec : {kv::Codec::kRaw, kv::Codec::kInt8PerChannel, kv::Codec::kFp8E4M3PerHead,
                             kv::Codec::kInt4Grouped}) {
      for (kv::Compression comp : {kv::Compression::kNone, kv::Compression::kZstd}) {
        kv::KvChunkHeader h;
        h.fingerprint[0] = 7;
        h.dtype = dt;
        h.codec = codec;
        h.compression = comp;
        h.num_layers = 2;
        h.num_kv_heads = 2;
        h.head_dim = 4;
        h.tokens = {1, 2, 3};
        h.key = kv::ChunkKey::Of(h.fingerprint, h.tokens);
        auto hb = kv::EncodeHeader(&h);
        if (!hb.ok()) continue;
        std::vector<float> k(h.LayerElements()), v(h.LayerElements());
        for (size_t i = 0; i < k.size(); ++i) {
          k[i] = 0.25f * static_cast<float>(i) - 1.0f;
          v[i] = 0.5f - 0.125f * static_cast<float>(i);
        }
        const int64_t e = static_cast<int64_t>(k.size());
        auto rec = kv::EncodeLayer(h, 1, TensorView::Contiguous(k.data(), DType::kF32, {e}),
                                   TensorView::Contiguous(v.data(), DType::kF32, {e}));
        if (!rec.ok()) {
          rec = kv::EncodeLayer(
              h, 1, TensorView::Contiguous(k.data(), DType::kF32, {2, 3, 4}),
              TensorView::Contiguous(v.data(), DType::kF32, {2, 3, 4}));
        }
        if (!rec.ok()) continue;
        for (uint8_t mode : {uint8_t{2}, uint8_t{3}}) {
          std::string in(1, static_cast<char>(mode));
          in += ragkv::fuzz::U16Prefixed(*hb);
          in += *rec;
          ragkv::fuzz::WriteFile(dir + "/seed_" + std::to_string(n++), in);
        }
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::string d = ragkv::fuzz::SeedDir(); !d.empty()) {
    WriteSeeds(d);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ragkv::fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Byte();
  std::string header(in.Take(in.U16()));
  std::string record(in.Rest());
  if (mode & 1) {
    FixHeaderChecksum(&header);
    FixLayerChecksum(&record);
  }
  (void)kv::PeekFingerprint(header);
  (void)kv::PeekNumLayers(header);
  (void)kv::ChunkKey::FromHex(record.substr(0, 32));
  (void)kv::ChunkKey::FromBytes(record.substr(0, 16));
  auto h = kv::DecodeHeader(header);
  if (!h.ok()) return 0;
  // Round trip: a decoded header re-encodes to the same blob, except in the
  // v1 reserved bytes (10, 11), which DecodeHeader does not require to
  // be zero (found by this fuzzer; reported) -- and so except the checksum.
  kv::KvChunkHeader copy = *h;
  auto again = kv::EncodeHeader(&copy);
  if (!again.ok() || again->size() != header.size()) __builtin_trap();
  std::string canonical = header;
  for (size_t i : {10, 11}) canonical[i] = 0;  // 9, 60..63: the record context (issue 40)
  const size_t body = header.size() - kv::kHeaderChecksumBytes;
  if (again->compare(0, body, canonical, 0, body) != 0) __builtin_trap();
  auto redecoded = kv::DecodeHeader(*again);
  if (!redecoded.ok() || redecoded->tokens != h->tokens || redecoded->key.bytes != h->key.bytes ||
      redecoded->fingerprint != h->fingerprint || redecoded->num_layers != h->num_layers) {
    __builtin_trap();
  }
  const uint32_t layer = (mode >> 1) & 3;
  auto view = kv::ParseLayerRecord(*h, record, layer);
  if (!view.ok()) return 0;
  if (h->LayerElements() > (uint64_t{1} << 20)) return 0;  // keep iterations fast
  std::vector<float> k(h->LayerElements()), v(h->LayerElements());
  (void)kv::DecodeLayerToF32(*h, record, layer, k.data(), v.data());
  return 0;
}
