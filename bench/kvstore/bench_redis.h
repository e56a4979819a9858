// bench_redis.h: the Redis tier benchmark (issue 4: "Redis tier vs raw
// hiredis GET of the same bytes, target >= 0.8").
//
// For one chunk geometry, Puts one fp16 raw chunk into a RedisTier on the
// given server, then measures in the same run, same server:
//  * tier read: ReadChunk (header + every layer in one pipeline once the
//    tier's layout hint is known; frames and XXH3 verified, split layers
//    reassembled), what TieredStore::Get asks of the tier; and, without a
//    target, the two-round-trip GetHeader + ReadChunk;
//  * raw hiredis: one redisContext, one pipeline of GET for every Redis
//    value of that chunk (the same values: header + all layer parts, same
//    keys, same count), replies either kept until the end or freed at once.
// Both are reported as GB/s of the chunk's EncodedChunk bytes; the best of
// `repeats` runs is kept. Also a Put row vs a raw pipelined SET of the same
// values (no target).
//
// Plugs into RunKvStoreBench through KvBenchOptions::extra_rows:
//   opts.extra_rows = [&](const KvBenchShape& s) { return RedisTierBenchRows(s, redis_opts); };
// Not thread-safe with itself; writes keys under `key_prefix` and deletes them.
#ifndef RAGKV_BENCH_KVSTORE_BENCH_REDIS_H_
#define RAGKV_BENCH_KVSTORE_BENCH_REDIS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/kvstore/bench_kvstore.h"

namespace ragkv::kvstore {

struct RedisBenchOptions {
  // endpoint: "host:port" of a standalone server (or a cluster seed). Required.
  std::string endpoint;
  // max_value_bytes: the tier's split size (RedisTierOptions). Default 8 MiB.
  uint64_t max_value_bytes = uint64_t{8} << 20;
  // repeats: measurements per row; the best is kept. Default 5.
  int repeats = 5;
  // key_prefix: namespace for the benchmark's keys. Default "ragkv-bench".
  std::string key_prefix = "ragkv-bench";
};

// RedisTierBenchRows: rows "redis tier ReadChunk" (target 0.8 vs raw
// hiredis GET, replies kept / freed), "GetHeader+ReadChunk" (no target) and
// "redis tier put" (vs raw pipelined SET) for `shape`.
absl::StatusOr<std::vector<KvBenchRow>> RedisTierBenchRows(const KvBenchShape& shape,
                                                           const RedisBenchOptions& options);

}  // namespace ragkv::kvstore

#endif  // RAGKV_BENCH_KVSTORE_BENCH_REDIS_H_
