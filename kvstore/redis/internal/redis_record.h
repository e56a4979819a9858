// redis_record.h: key names and the value framing of the Redis tier
// (private to kvstore; format specified in docs/kvstore.md, "Redis tier").
//
// Keys of one chunk share the hash tag {<keyhex>}, so they live in one Redis
// Cluster slot (one node, one pipeline):
//   <prefix>:{<keyhex>}:h          header value (commit marker)
//   <prefix>:{<keyhex>}:L<i>       part 0 of layer i's record
//   <prefix>:{<keyhex>}:L<i>:p<j>  part j >= 1 of layer i's record
//   <prefix>:fp:{<fphex>}          SET of <keyhex> of chunks under a fingerprint
//
// Every value is a 48-byte frame followed by a payload:
//   off size field
//    0   4   magic "RKV1"
//    4   1   frame version (1)
//    5   1   kind: 1 = header, 2 = layer part
//    6   2   reserved (0)
//    8   4   layer index (0 for the header)
//   12   4   part index j (0 for the header)
//   16   4   count: parts of this layer (layer part) / layers (header)
//   20   4   reserved (0)
//   24   8   write id: random per Put, identical in every value of one Put
//   32   8   total bytes: the whole layer record / the header blob
//   40   8   checksum: XXH3-64 of (redis key || bytes 0..39 || payload)
// all little-endian. A layer part payload is a slice of the layer record; the
// header payload is the header blob followed by `count` u32 LE part counts
// (one per layer). Binding the key into the checksum means a value copied
// or renamed to another key fails verification.
//
// Thread safety: pure functions.
#ifndef RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_RECORD_H_
#define RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/chunk_key.h"

namespace ragkv::kvstore::internal {

inline constexpr size_t kRedisFrameBytes = 48;
inline constexpr uint8_t kRedisFrameVersion = 1;

enum class RedisRecordKind : uint8_t { kHeader = 1, kLayerPart = 2 };

struct RedisFrame {
  RedisRecordKind kind = RedisRecordKind::kLayerPart;
  uint32_t layer = 0;
  uint32_t part = 0;
  uint32_t count = 0;
  uint64_t write_id = 0;
  uint64_t total_bytes = 0;
};

// Key names (see file comment).
std::string RedisHeaderKey(std::string_view prefix, const ChunkKey& key);
std::string RedisLayerKey(std::string_view prefix, const ChunkKey& key, uint32_t layer,
                          uint32_t part);
std::string RedisFingerprintIndexKey(std::string_view prefix, const Fingerprint& fp);

// EncodeRedisValue: frame || payload || trailer, checksummed with `redis_key`.
std::string EncodeRedisValue(std::string_view redis_key, const RedisFrame& frame,
                             std::string_view payload, std::string_view trailer = {});

// DecodedRedisValue: a verified value; `payload` points into the input.
struct DecodedRedisValue {
  RedisFrame frame;
  std::string_view payload;
};

// DecodeRedisValue: verifies magic, version, kind, checksum (bound to
// `redis_key`). DataLoss on any failure.
absl::StatusOr<DecodedRedisValue> DecodeRedisValue(std::string_view redis_key,
                                                   std::string_view value);

// EncodePartCounts / DecodePartCounts: the header trailer (u32 LE each).
std::string EncodePartCounts(const std::vector<uint32_t>& counts);
absl::StatusOr<std::vector<uint32_t>> DecodePartCounts(std::string_view trailer, uint32_t n);

// PartsFor: number of parts a record of `bytes` needs when each value holds
// at most `max_value_bytes` (frame included). At least 1.
uint32_t PartsFor(uint64_t bytes, uint64_t max_value_bytes);

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_REDIS_INTERNAL_REDIS_RECORD_H_
