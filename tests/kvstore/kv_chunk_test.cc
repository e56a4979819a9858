#include "kvstore/kv_chunk.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/convert.h"
#include "tests/kvstore/test_util.h"
#define XXH_INLINE_ALL
#include "xxhash.h"

namespace ragkv::kvstore {
namespace {

using kernels::DType;
using testing::ChunkSpec;
using testing::MakeChunk;
using testing::TestChunk;

// RoundTripRaw: decoding must equal the dtype rounding of the input exactly
// (f32: bit-exact; f16/bf16: equal to a scalar round-to-nearest-even
// reference conversion, i.e. |err| <= half an ulp of that dtype).
float RoundRef(float x, DType d) {
  switch (d) {
    case DType::kF16: return kernels::HalfToFloat(kernels::FloatToHalf(x));
    case DType::kBF16: return kernels::Bf16ToFloat(kernels::FloatToBf16(x));
    default: return x;
  }
}

struct CodecCase {
  DType dtype;
  Codec codec;
  Compression compression;
};

class CodecRoundTrip : public ::testing::TestWithParam<CodecCase> {};

// ExpectInt4Bound: int4 groups of 32 (keys: per (head, channel) along the
// tokens; values: per (head, token) along the channels), each decoded within
// step/2 of its input, where step is at most a naive (max - min) / 15 plus
// the f16 rounding of lo (down) and step (up): step <= ((max - min) +
// ulp16(min)) / 15 * (1 + 2^-10). Plus 1e-6 relative slack for f32 rounding.
void ExpectInt4Bound(const std::vector<float>& ref, const std::vector<float>& got, int64_t H,
                     int64_t T, int64_t D, bool keys) {
  const int64_t outer = keys ? (T + 31) / 32 : D == 0 ? 0 : (D + 31) / 32;
  for (int64_t hh = 0; hh < H; ++hh) {
    for (int64_t a = 0; a < (keys ? D : T); ++a) {  // a: channel (keys) or token (values)
      for (int64_t g = 0; g < outer; ++g) {
        std::vector<size_t> idx;
        for (int64_t i = g * 32; i < std::min<int64_t>((g + 1) * 32, keys ? T : D); ++i) {
          idx.push_back(static_cast<size_t>(keys ? (hh * T + i) * D + a : (hh * T + a) * D + i));
        }
        float mn = ref[idx[0]], mx = ref[idx[0]];
        for (size_t i : idx) mn = std::min(mn, ref[i]), mx = std::max(mx, ref[i]);
        const float ulp = std::max(std::fabs(mn) / 1024.f, 6.0e-8f);
        const float step = (mx - mn + ulp) / 15.f * (1 + 1.0f / 1024);
        for (size_t i : idx) {
          ASSERT_LE(std::fabs(got[i] - ref[i]), step / 2 * (1 + 1e-5f) + 1e-6f * std::fabs(ref[i]))
              << (keys ? "K" : "V") << " h" << hh << " a" << a << " g" << g << " i" << i;
        }
      }
    }
  }
}

TEST_P(CodecRoundTrip, DecodesWithinStatedBound) {
  const CodecCase cc = GetParam();
  ChunkSpec spec;
  spec.tokens = 37;
  spec.layers = 3;
  spec.kv_heads = 3;
  spec.head_dim = 16;
  spec.dtype = cc.dtype;
  spec.codec = cc.codec;
  spec.compression = cc.compression;
  TestChunk c = MakeChunk(spec);
  ASSERT_EQ(c.encoded->layers.size(), 3u);
  auto h = DecodeHeader(c.encoded->header);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->key, c.key);
  EXPECT_EQ(h->fingerprint, c.header.fingerprint);
  EXPECT_EQ(h->tokens, c.header.tokens);
  EXPECT_EQ(h->digest, c.header.digest);
  EXPECT_EQ(h->codec, cc.codec);
  const size_t n = h->LayerElements();
  const int64_t H = spec.kv_heads, T = spec.tokens, D = spec.head_dim;
  std::vector<float> k(n), v(n);
  for (uint32_t l = 0; l < spec.layers; ++l) {
    ASSERT_TRUE(DecodeLayerToF32(*h, c.encoded->layers[l], l, k.data(), v.data()).ok());
    for (int which = 0; which < 2; ++which) {
      const std::vector<float>& ref = which == 0 ? c.k[l] : c.v[l];
      const std::vector<float>& got = which == 0 ? k : v;
      if (cc.codec == Codec::kRaw) {
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], RoundRef(ref[i], cc.dtype)) << i;
      } else if (cc.codec == Codec::kFp8E4M3PerHead) {
        // fp8 e4m3 per head: |err| <= max(|x| 2^-4, scale 2^-10) with scale =
        // max over the head of |x| / 448 (x: the f32 input; 8-bit codecs
        // quantize what they are given, the dtype only records it).
        for (int64_t hh = 0; hh < H; ++hh) {
          float amax = 0;
          for (int64_t i = hh * T * D; i < (hh + 1) * T * D; ++i) {
            amax = std::max(amax, std::fabs(ref[i]));
          }
          for (int64_t i = hh * T * D; i < (hh + 1) * T * D; ++i) {
            const float x = ref[i];
            const float bound = std::max(std::fabs(x) / 16.f, amax / 448.f / 1024.f) * (1 + 1e-5f);
            ASSERT_LE(std::fabs(got[i] - x), bound) << "h" << hh << " i" << i;
          }
        }
      } else if (cc.codec == Codec::kInt4Grouped) {
        ExpectInt4Bound(ref, got, H, T, D, which == 0);
      } else {
        // Int8 per channel: |err| <= scale/2 with scale = max_t |x[h,t,d]| / 127
        // (naive reference), plus 1e-6 relative slack for f32 rounding.
        for (int64_t hh = 0; hh < H; ++hh) {
          for (int64_t d = 0; d < D; ++d) {
            float amax = 0;
            for (int64_t t = 0; t < T; ++t) amax = std::max(amax, std::fabs(ref[(hh * T + t) * D + d]));
            const float bound = amax / 127.f / 2.f * (1 + 1e-5f) + 1e-7f;
            for (int64_t t = 0; t < T; ++t) {
              const size_t i = static_cast<size_t>((hh * T + t) * D + d);
              ASSERT_LE(std::fabs(got[i] - ref[i]), bound) << "h" << hh << " t" << t << " d" << d;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllCodecs, CodecRoundTrip,
    ::testing::Values(CodecCase{DType::kF32, Codec::kRaw, Compression::kNone},
                      CodecCase{DType::kF16, Codec::kRaw, Compression::kNone},
                      CodecCase{DType::kBF16, Codec::kRaw, Compression::kNone},
                      CodecCase{DType::kF32, Codec::kRaw, Compression::kZstd},
                      CodecCase{DType::kF16, Codec::kRaw, Compression::kZstd},
                      CodecCase{DType::kBF16, Codec::kRaw, Compression::kZstd},
                      CodecCase{DType::kF16, Codec::kInt8PerChannel, Compression::kNone},
                      CodecCase{DType::kF32, Codec::kInt8PerChannel, Compression::kZstd},
                      CodecCase{DType::kF16, Codec::kFp8E4M3PerHead, Compression::kNone},
                      CodecCase{DType::kF32, Codec::kFp8E4M3PerHead, Compression::kZstd},
                      CodecCase{DType::kF16, Codec::kInt4Grouped, Compression::kNone},
                      CodecCase{DType::kF32, Codec::kInt4Grouped, Compression::kZstd}));

// DecodeLayerInto writes the rows of a strided destination (a chunk's rows in
// the fused cache: head stride = capacity * D, rows dense) exactly as
// DecodeLayerToF32 writes a contiguous one, for every codec, and touches
// nothing else.
TEST(KvChunk, DecodeLayerIntoStridedRowsEqualsTheContiguousDecode) {
  for (Codec codec : {Codec::kRaw, Codec::kInt8PerChannel, Codec::kFp8E4M3PerHead,
                      Codec::kInt4Grouped}) {
    for (Compression comp : {Compression::kNone, Compression::kZstd}) {
      ChunkSpec spec;
      spec.tokens = 21;
      spec.layers = 2;
      spec.kv_heads = 2;
      spec.head_dim = 8;
      spec.dtype = DType::kF16;
      spec.codec = codec;
      spec.compression = comp;
      TestChunk c = MakeChunk(spec);
      auto h = DecodeHeader(c.encoded->header);
      ASSERT_TRUE(h.ok());
      const int64_t H = 2, T = 21, D = 8, cap = 40, off = 5;
      std::vector<float> k(H * T * D), v(H * T * D);
      ASSERT_TRUE(DecodeLayerToF32(*h, c.encoded->layers[1], 1, k.data(), v.data()).ok());
      std::vector<float> fk(H * cap * D, -9.f), fv(H * cap * D, -9.f);
      auto view = [&](std::vector<float>& buf) {
        kernels::TensorView t =
            kernels::TensorView::Contiguous(buf.data() + off * D, DType::kF32, {H, T, D});
        t.stride[0] = cap * D;
        return t;
      };
      ASSERT_TRUE(DecodeLayerInto(*h, c.encoded->layers[1], 1, view(fk), view(fv)).ok());
      for (int64_t hh = 0; hh < H; ++hh) {
        for (int64_t r = 0; r < cap; ++r) {
          for (int64_t d = 0; d < D; ++d) {
            const size_t i = static_cast<size_t>((hh * cap + r) * D + d);
            const bool inside = r >= off && r < off + T;
            const size_t j = static_cast<size_t>((hh * T + (r - off)) * D + d);
            ASSERT_EQ(fk[i], inside ? k[j] : -9.f) << CodecName(codec) << " h" << hh << " r" << r;
            ASSERT_EQ(fv[i], inside ? v[j] : -9.f) << CodecName(codec) << " h" << hh << " r" << r;
          }
        }
      }
      // A destination of the wrong shape is refused before anything is written.
      std::vector<float> small(4);
      EXPECT_EQ(DecodeLayerInto(*h, c.encoded->layers[1], 1,
                                kernels::TensorView::Contiguous(small.data(), DType::kF32, {1, 1, 4}),
                                view(fv))
                    .code(),
                absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(KvChunk, CodecNamesParseBackAndUnknownNamesAreRefused) {
  for (Codec c : {Codec::kRaw, Codec::kInt8PerChannel, Codec::kFp8E4M3PerHead,
                  Codec::kInt4Grouped}) {
    auto back = ParseCodec(CodecName(c));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, c);
  }
  auto bad = ParseCodec("fp4");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("raw, int8, fp8 or int4"), std::string::npos);
}

// Record sizes: an 8-bit codec stores ~1 byte per element plus its scales,
// so it is >= 1.9x smaller than f16 at a realistic chunk shape.
TEST(KvChunk, EightBitCodecsHalveTheF16Record) {
  KvChunkHeader h;
  h.num_layers = 32;
  h.num_kv_heads = 8;
  h.head_dim = 128;
  h.tokens.assign(256, 1);
  h.dtype = DType::kF16;
  h.codec = Codec::kRaw;
  const double f16 = static_cast<double>(h.UncompressedBytes());
  for (Codec c : {Codec::kInt8PerChannel, Codec::kFp8E4M3PerHead}) {
    h.codec = c;
    EXPECT_GE(f16 / static_cast<double>(h.UncompressedBytes()), 1.9) << CodecName(c);
  }
  // int4: 4 bits per element plus one f16 pair per 32 (1 bit per element):
  // 16 / 5 = 3.2x at most, >= 3x with the header and record prefixes.
  h.codec = Codec::kInt4Grouped;
  EXPECT_GE(f16 / static_cast<double>(h.UncompressedBytes()), 3.0);
  EXPECT_LE(f16 / static_cast<double>(h.UncompressedBytes()), 3.2);
}

// The int4 codec refuses, by name, values it cannot represent (non-finite or
// beyond the f16 range of its group parameters) instead of storing garbage.
TEST(KvChunk, Int4RefusesValuesOutsideItsRange) {
  for (float bad : {std::nanf(""), INFINITY, 70000.0f, -1e30f}) {
    ChunkSpec spec;
    spec.dtype = DType::kF32;
    spec.codec = Codec::kInt4Grouped;
    TestChunk c = MakeChunk(spec);
    std::vector<float> k = c.k[0];
    k[k.size() / 2] = bad;
    const int64_t H = spec.kv_heads, T = spec.tokens, D = spec.head_dim;
    absl::Status s =
        EncodeLayer(c.header, 0, kernels::TensorView::Contiguous(k.data(), DType::kF32, {H, T, D}),
                    kernels::TensorView::Contiguous(c.v[0].data(), DType::kF32, {H, T, D}))
            .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("int4"), std::string::npos) << s;
  }
}

TEST(KvChunk, RawViewsAreZeroCopy) {
  ChunkSpec spec;
  spec.dtype = DType::kF16;
  TestChunk c = MakeChunk(spec);
  const std::string& rec = c.encoded->layers[1];
  auto views = RawLayerViews(c.header, rec, 1);
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_EQ(views->k.data, rec.data() + kLayerPrefixBytes);
  EXPECT_EQ(views->k.dtype, DType::kF16);
  EXPECT_EQ(views->k.dim(1), spec.tokens);
  const uint16_t* k16 = static_cast<const uint16_t*>(views->k.data);
  EXPECT_EQ(kernels::HalfToFloat(k16[5]), RoundRef(c.k[1][5], DType::kF16));
  spec.codec = Codec::kInt8PerChannel;
  TestChunk q = MakeChunk(spec);
  EXPECT_EQ(RawLayerViews(q.header, q.encoded->layers[0], 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(KvChunk, ZstdShrinksCompressibleData) {
  KvChunkHeader h;
  h.tokens = testing::TestTokens(64, 1);
  h.num_layers = 1;
  h.num_kv_heads = 2;
  h.head_dim = 32;
  h.dtype = DType::kF16;
  h.compression = Compression::kZstd;
  ASSERT_TRUE(EncodeHeader(&h).ok());
  std::vector<float> zeros(h.LayerElements(), 0.5f);
  auto view = kernels::TensorView::Contiguous(zeros.data(), DType::kF32, {2, 64, 32});
  auto rec = EncodeLayer(h, 0, view, view);
  ASSERT_TRUE(rec.ok());
  EXPECT_LT(rec->size(), h.RawPayloadBytes() / 10);
  std::vector<float> k(h.LayerElements()), v(h.LayerElements());
  ASSERT_TRUE(DecodeLayerToF32(h, *rec, 0, k.data(), v.data()).ok());
  EXPECT_EQ(k[17], 0.5f);
}

TEST(KvChunk, EveryFlippedByteIsDetected) {
  ChunkSpec spec;
  spec.tokens = 4;
  spec.kv_heads = 1;
  spec.head_dim = 4;
  spec.layers = 1;
  TestChunk c = MakeChunk(spec);
  std::vector<float> k(c.header.LayerElements()), v(c.header.LayerElements());
  const std::string& rec = c.encoded->layers[0];
  for (size_t i = 0; i < rec.size(); ++i) {
    std::string bad = rec;
    bad[i] ^= 0x10;
    absl::Status s = DecodeLayerToF32(c.header, bad, 0, k.data(), v.data());
    ASSERT_FALSE(s.ok()) << "flip at byte " << i << " not detected";
  }
  const std::string& hdr = c.encoded->header;
  for (size_t i = 0; i < hdr.size(); ++i) {
    std::string bad = hdr;
    bad[i] ^= 0x01;
    ASSERT_FALSE(DecodeHeader(bad).ok()) << "header flip at byte " << i << " not detected";
  }
}

TEST(KvChunk, TruncatedAndPaddedInputsAreDataLoss) {
  TestChunk c = MakeChunk(ChunkSpec{});
  const std::string& hdr = c.encoded->header;
  const std::string& rec = c.encoded->layers[0];
  std::vector<float> k(c.header.LayerElements()), v(c.header.LayerElements());
  for (size_t cut : {size_t{0}, size_t{10}, size_t{63}, size_t{64}, hdr.size() - 1}) {
    EXPECT_EQ(DecodeHeader(hdr.substr(0, cut)).status().code(), absl::StatusCode::kDataLoss) << cut;
  }
  EXPECT_EQ(DecodeHeader(hdr + "x").status().code(), absl::StatusCode::kDataLoss);
  for (size_t cut : {size_t{0}, size_t{20}, size_t{64}, rec.size() - 1}) {
    EXPECT_EQ(DecodeLayerToF32(c.header, rec.substr(0, cut), 0, k.data(), v.data()).code(),
              absl::StatusCode::kDataLoss)
        << cut;
  }
}

TEST(KvChunk, UnknownVersionAndCodecAreUnimplemented) {
  TestChunk c = MakeChunk(ChunkSpec{});
  KvChunkHeader h = c.header;
  h.version = 2;
  EXPECT_EQ(EncodeHeader(&h).status().code(), absl::StatusCode::kUnimplemented);
  h = c.header;
  h.codec = static_cast<Codec>(9);
  EXPECT_EQ(EncodeHeader(&h).status().code(), absl::StatusCode::kUnimplemented);
  h = c.header;
  h.dtype = DType::kI8;
  EXPECT_EQ(EncodeHeader(&h).status().code(), absl::StatusCode::kUnimplemented);
  // A validly checksummed header from a "future" writer: version 2 on disk.
  h = c.header;
  std::string blob = *EncodeHeader(&h);
  blob[4] = 2;
  EXPECT_EQ(DecodeHeader(blob).status().code(), absl::StatusCode::kDataLoss);  // checksum
  // Re-checksum as a future writer would: now the version itself is refused.
  const uint64_t sum = XXH3_64bits(blob.data(), blob.size() - 8);
  std::memcpy(blob.data() + blob.size() - 8, &sum, 8);
  EXPECT_EQ(DecodeHeader(blob).status().code(), absl::StatusCode::kUnimplemented);
  // Same for an unknown codec byte.
  blob = *EncodeHeader(&h);
  blob[7] = 9;
  const uint64_t sum2 = XXH3_64bits(blob.data(), blob.size() - 8);
  std::memcpy(blob.data() + blob.size() - 8, &sum2, 8);
  EXPECT_EQ(DecodeHeader(blob).status().code(), absl::StatusCode::kUnimplemented);
  // Layer record with an unknown version is Unimplemented even if intact
  // otherwise (version is checked before the checksum).
  std::string rec = c.encoded->layers[0];
  rec[4] = 7;
  EXPECT_EQ(ParseLayerRecord(c.header, rec, 0).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(KvChunk, NonZeroReservedHeaderBytesAreDataLoss) {
  TestChunk c = MakeChunk(ChunkSpec{});
  KvChunkHeader h = c.header;
  const std::string good = *EncodeHeader(&h);
  ASSERT_TRUE(DecodeHeader(good).ok());
  // 10, 11: reserved. 9 alone (a neighbours record at first position 0) and
  // 60 / 63 alone (a chunk-local record not at position 0) are inconsistent
  // context fields: damage, never a record of another kind.
  for (size_t i : {9u, 10u, 11u, 60u, 63u}) {
    std::string blob = good;
    blob[i] = 1;
    // Re-checksummed, so only the reserved-byte / context rule can reject it.
    const uint64_t sum = XXH3_64bits(blob.data(), blob.size() - 8);
    std::memcpy(blob.data() + blob.size() - 8, &sum, 8);
    EXPECT_EQ(DecodeHeader(blob).status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
  }
  // An unknown context byte is a future writer's: Unimplemented.
  std::string blob = good;
  blob[9] = 7;
  blob[60] = 5;
  const uint64_t sum = XXH3_64bits(blob.data(), blob.size() - 8);
  std::memcpy(blob.data() + blob.size() - 8, &sum, 8);
  EXPECT_EQ(DecodeHeader(blob).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(KvChunk, RecordContextIsInTheHeaderAndCheckedByName) {
  TestChunk c = MakeChunk(ChunkSpec{});
  KvChunkHeader h = c.header;
  const std::string plain = *EncodeHeader(&h);
  // A chunk-local record's bytes are those of a pre-issue-40 header.
  EXPECT_EQ(plain[9], 0);
  EXPECT_EQ(plain.substr(60, 4), std::string(4, '\0'));
  h.context = RecordContext::kNeighbours;
  h.first_position = 0x00030201;
  const std::string nbr = *EncodeHeader(&h);
  EXPECT_EQ(nbr[9], 1);
  EXPECT_EQ(nbr.substr(60, 4), std::string("\x01\x02\x03\x00", 4));  // u32 LE
  auto d = DecodeHeader(nbr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->context, RecordContext::kNeighbours);
  EXPECT_EQ(d->first_position, 0x00030201u);
  EXPECT_NE(d->digest, DecodeHeader(plain)->digest);  // layers bind to one of them
  EXPECT_TRUE(CheckRecordContext(*d, RecordContext::kNeighbours).ok());
  const absl::Status s = CheckRecordContext(*d, RecordContext::kChunkLocal);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("a neighbours record"), std::string::npos) << s;
  EXPECT_NE(s.message().find("as a chunk-local one"), std::string::npos) << s;
  EXPECT_EQ(CheckRecordContext(*DecodeHeader(plain), RecordContext::kNeighbours).code(),
            absl::StatusCode::kFailedPrecondition);
  // Inconsistent fields are refused on encode.
  h.first_position = 0;
  EXPECT_EQ(EncodeHeader(&h).status().code(), absl::StatusCode::kInvalidArgument);
  h.context = RecordContext::kChunkLocal;
  h.first_position = 3;
  EXPECT_EQ(EncodeHeader(&h).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvChunk, RecordsAreBoundToTheirHeaderAndLayer) {
  ChunkSpec a;
  TestChunk ca = MakeChunk(a);
  ChunkSpec b = a;
  b.codec = Codec::kInt8PerChannel;  // same key, different encoding
  TestChunk cb = MakeChunk(b);
  ASSERT_EQ(ca.key, cb.key);
  ASSERT_NE(ca.header.digest, cb.header.digest);
  EXPECT_EQ(ParseLayerRecord(ca.header, cb.encoded->layers[0], 0).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseLayerRecord(ca.header, ca.encoded->layers[1], 0).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(ParseLayerRecord(ca.header, ca.encoded->layers[1], 1).ok());
}

TEST(KvChunk, BadShapesAreRejectedOnEncode) {
  KvChunkHeader h;
  h.tokens = {1, 2, 3};
  h.num_layers = 1;
  h.num_kv_heads = 1;
  h.head_dim = 0;
  EXPECT_EQ(EncodeHeader(&h).status().code(), absl::StatusCode::kInvalidArgument);
  h.head_dim = 4;
  h.num_layers = kMaxLayers + 1;
  EXPECT_EQ(EncodeHeader(&h).status().code(), absl::StatusCode::kInvalidArgument);
  h.num_layers = 1;
  ASSERT_TRUE(EncodeHeader(&h).ok());
  std::vector<float> x(11);
  auto wrong = kernels::TensorView::Contiguous(x.data(), DType::kF32, {11});
  EXPECT_EQ(EncodeLayer(h, 0, wrong, wrong).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> ok(12);
  auto right = kernels::TensorView::Contiguous(ok.data(), DType::kF32, {1, 3, 4});
  EXPECT_EQ(EncodeLayer(h, 1, right, right).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(EncodeLayer(h, 0, right, right).ok());
}

TEST(KvChunk, PeekFieldsAtFixedOffsets) {
  TestChunk c = MakeChunk(ChunkSpec{});
  EXPECT_EQ(*PeekFingerprint(c.encoded->header), c.header.fingerprint);
  EXPECT_EQ(*PeekNumLayers(c.encoded->header), c.header.num_layers);
  EXPECT_FALSE(PeekFingerprint("RKVX").ok());
}

}  // namespace
}  // namespace ragkv::kvstore
