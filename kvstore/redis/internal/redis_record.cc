#include "kvstore/redis/internal/redis_record.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvstore/internal/xxh3_fast.h"

namespace ragkv::kvstore::internal {
namespace {

constexpr char kMagic[4] = {'R', 'K', 'V', '1'};
constexpr size_t kChecksumOffset = 40;

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// Checksum: XXH3-64 of key || frame bytes 0..39 || payload (the AVX2 build
// where the CPU has it: same value, about twice the speed of libxxhash's).
uint64_t Checksum(std::string_view redis_key, const char* frame40, std::string_view rest) {
  return Xxh3_64x3(redis_key.data(), redis_key.size(), frame40, kChecksumOffset, rest.data(),
                   rest.size());
}

}  // namespace

std::string RedisHeaderKey(std::string_view prefix, const ChunkKey& key) {
  return absl::StrCat(absl::string_view(prefix.data(), prefix.size()), ":{", key.ToHex(), "}:h");
}

std::string RedisLayerKey(std::string_view prefix, const ChunkKey& key, uint32_t layer,
                          uint32_t part) {
  std::string k =
      absl::StrCat(absl::string_view(prefix.data(), prefix.size()), ":{", key.ToHex(), "}:L", layer);
  if (part > 0) absl::StrAppend(&k, ":p", part);
  return k;
}

std::string RedisFingerprintIndexKey(std::string_view prefix, const Fingerprint& fp) {
  return absl::StrCat(absl::string_view(prefix.data(), prefix.size()), ":fp:{",
                      FingerprintToHex(fp), "}");
}

std::string EncodeRedisValue(std::string_view redis_key, const RedisFrame& f,
                             std::string_view payload, std::string_view trailer) {
  std::string out(kRedisFrameBytes + payload.size() + trailer.size(), '\0');
  char* p = out.data();
  std::memcpy(p, kMagic, 4);
  p[4] = static_cast<char>(kRedisFrameVersion);
  p[5] = static_cast<char>(f.kind);
  PutU32(p + 8, f.layer);
  PutU32(p + 12, f.part);
  PutU32(p + 16, f.count);
  PutU64(p + 24, f.write_id);
  PutU64(p + 32, f.total_bytes);
  if (!payload.empty()) std::memcpy(p + kRedisFrameBytes, payload.data(), payload.size());
  if (!trailer.empty()) {
    std::memcpy(p + kRedisFrameBytes + payload.size(), trailer.data(), trailer.size());
  }
  std::string_view rest(p + kRedisFrameBytes, payload.size() + trailer.size());
  PutU64(p + kChecksumOffset, Checksum(redis_key, p, rest));
  return out;
}

absl::StatusOr<DecodedRedisValue> DecodeRedisValue(std::string_view redis_key,
                                                   std::string_view value) {
  auto fail = [&](std::string_view why) {
    return absl::DataLossError(absl::StrCat("redis value '",
                                            absl::string_view(redis_key.data(), redis_key.size()),
                                            "': ", absl::string_view(why.data(), why.size())));
  };
  if (value.size() < kRedisFrameBytes) return fail("shorter than its frame");
  const char* p = value.data();
  if (std::memcmp(p, kMagic, 4) != 0) return fail("bad magic");
  if (static_cast<uint8_t>(p[4]) != kRedisFrameVersion) return fail("unknown frame version");
  std::string_view rest = value.substr(kRedisFrameBytes);
  if (GetU64(p + kChecksumOffset) != Checksum(redis_key, p, rest)) return fail("checksum mismatch");
  DecodedRedisValue d;
  uint8_t kind = static_cast<uint8_t>(p[5]);
  if (kind != static_cast<uint8_t>(RedisRecordKind::kHeader) &&
      kind != static_cast<uint8_t>(RedisRecordKind::kLayerPart)) {
    return fail("unknown record kind");
  }
  d.frame.kind = static_cast<RedisRecordKind>(kind);
  d.frame.layer = GetU32(p + 8);
  d.frame.part = GetU32(p + 12);
  d.frame.count = GetU32(p + 16);
  d.frame.write_id = GetU64(p + 24);
  d.frame.total_bytes = GetU64(p + 32);
  d.payload = rest;
  return d;
}

std::string EncodePartCounts(const std::vector<uint32_t>& counts) {
  std::string out(4 * counts.size(), '\0');
  for (size_t i = 0; i < counts.size(); ++i) PutU32(out.data() + 4 * i, counts[i]);
  return out;
}

absl::StatusOr<std::vector<uint32_t>> DecodePartCounts(std::string_view trailer, uint32_t n) {
  if (trailer.size() != 4 * uint64_t{n}) {
    return absl::DataLossError("redis header: part-count trailer has the wrong size");
  }
  std::vector<uint32_t> counts(n);
  for (uint32_t i = 0; i < n; ++i) {
    counts[i] = GetU32(trailer.data() + 4 * i);
    if (counts[i] == 0) return absl::DataLossError("redis header: layer with zero parts");
  }
  return counts;
}

uint32_t PartsFor(uint64_t bytes, uint64_t max_value_bytes) {
  const uint64_t per_part = max_value_bytes - kRedisFrameBytes;
  if (bytes == 0) return 1;
  return static_cast<uint32_t>((bytes + per_part - 1) / per_part);
}

}  // namespace ragkv::kvstore::internal
