// connector/wire.h, the one home of the wire format's definitions: the
// dtype mappings (v1::DType to and from kernels::DType and WireDType) agree
// with each other and refuse what the wire does not carry; the fingerprint's
// raw bytes round-trip and only 16 of them are accepted; the layer checksum
// is XXH3-64 of k followed by v (checked against a one-shot XXH3 of the
// concatenation).
#include "connector/wire.h"

#include <xxhash.h>

#include <string>

#include "gtest/gtest.h"

namespace ragkv::wire {
namespace {

using kernels::DType;

TEST(WireTest, KernelDTypesMapToTheProtoNamesAndBack) {
  EXPECT_EQ(ToProto(DType::kF32), v1::DTYPE_F32);
  EXPECT_EQ(ToProto(DType::kF16), v1::DTYPE_F16);
  EXPECT_EQ(ToProto(DType::kBF16), v1::DTYPE_BF16);
  EXPECT_EQ(ToProto(DType::kI8), v1::DTYPE_UNSPECIFIED);  // not a wire dtype
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    absl::StatusOr<DType> back = KernelDTypeFromProto(ToProto(d));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, d);
    // The engine side's WireDType of the same wire value has the same size.
    EXPECT_EQ(static_cast<size_t>(WireDTypeSize(FromProto(ToProto(d)))), kernels::DTypeSize(d));
    EXPECT_EQ(ToProto(FromProto(ToProto(d))), ToProto(d));
  }
}

TEST(WireTest, KernelDTypeFromProtoRefusesUnsetAndUnknown) {
  for (v1::DType d : {v1::DTYPE_UNSPECIFIED, static_cast<v1::DType>(99)}) {
    absl::StatusOr<DType> got = KernelDTypeFromProto(d);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  }
  // The engine side reads an unset dtype as f32 (FromProto is lenient).
  EXPECT_EQ(FromProto(v1::DTYPE_UNSPECIFIED), WireDType::kF32);
}

TEST(WireTest, FingerprintBytesRoundTripAndOnly16AreAccepted) {
  Fingerprint fp{};
  for (size_t i = 0; i < fp.size(); ++i) fp[i] = static_cast<uint8_t>(0xF0 + i);
  const std::string raw = FingerprintBytes(fp);
  ASSERT_EQ(raw.size(), kFingerprintBytes);
  for (size_t i = 0; i < raw.size(); ++i) {
    EXPECT_EQ(static_cast<uint8_t>(raw[i]), 0xF0 + i) << i;  // in order, unencoded
  }
  absl::StatusOr<Fingerprint> back = FingerprintFromBytes(raw);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, fp);
  for (size_t n : {size_t{0}, size_t{15}, size_t{17}}) {
    absl::StatusOr<Fingerprint> bad = FingerprintFromBytes(std::string(n, 'x'));
    ASSERT_FALSE(bad.ok()) << n;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(bad.status().message()).find("16 bytes"), std::string::npos)
        << bad.status();
  }
}

TEST(WireTest, LayerChecksumIsXxh3OfKThenV) {
  const std::string k = "keys: \x01\x02\x03 and some more bytes", v = "values";
  const std::string kv = k + v;
  EXPECT_EQ(LayerChecksum(k, v), XXH3_64bits(kv.data(), kv.size()));
  // Where k ends matters only through the concatenation.
  EXPECT_EQ(LayerChecksum(kv.substr(0, 3), kv.substr(3)), LayerChecksum(k, v));
  EXPECT_NE(LayerChecksum(v, k), LayerChecksum(k, v));
  EXPECT_EQ(LayerChecksum("", ""), XXH3_64bits("", 0));
}

}  // namespace
}  // namespace ragkv::wire
