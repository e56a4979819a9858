// bench_kvstore.h: the kvstore benchmark behind `ragkv bench kvstore`.
//
// Runs, in one process and one run, the ratios of issue 4: RAM tier Get vs
// memcpy of the same bytes; SSD tier cold-ish read vs an O_DIRECT sequential
// read of a file of the same size on the same filesystem; TieredStore Put vs
// raw RocksDB Put of the same bytes; single and concurrent readers. Prints a
// table to `out`. Extra rows (e.g. the Redis tier vs raw hiredis GET) are
// added through KvBenchOptions::extra_rows.
//
// Not thread-safe with itself (uses a scratch directory); call from main.
#ifndef RAGKV_BENCH_KVSTORE_BENCH_KVSTORE_H_
#define RAGKV_BENCH_KVSTORE_BENCH_KVSTORE_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ragkv::kvstore {

// KvBenchShape: one chunk geometry (fp16 raw unless stated).
struct KvBenchShape {
  std::string name;
  uint32_t tokens = 512;
  uint32_t layers = 32;
  uint32_t kv_heads = 8;
  uint32_t head_dim = 128;
};

// KvBenchRow: one measured comparison: `value` vs `baseline` (both GB/s or
// ops/s as `unit` says); ratio = value / baseline; target: the bar.
struct KvBenchRow {
  std::string shape;
  std::string what;
  std::string unit;
  double value = 0;
  double baseline = 0;
  std::string baseline_what;
  double target_ratio = 0;  // 0 = no target
  double ratio() const { return baseline > 0 ? value / baseline : 0; }
};

struct KvBenchOptions {
  // Scratch directory for RocksDB and the raw-read file (on the SSD under
  // test). Default: /tmp/ragkv_bench_kvstore.
  std::string dir = "/tmp/ragkv_bench_kvstore";
  // Shapes; empty = {llama-8B-like 512x32x8x128 fp16 (64 MiB), stories260K
  // 512x5x4x8}.
  std::vector<KvBenchShape> shapes;
  // Chunks per shape written for the read tests (cold SSD reads rotate
  // through them). Default 4.
  int chunks = 4;
  // Concurrent reader threads for the concurrent rows. Default 4.
  int threads = 4;
  // Repetitions per measurement (the best is kept). Default 3.
  int repeats = 3;
  // Hook for extra rows (e.g. the Redis tier): called once per shape with
  // the shape; returned rows are appended to the table.
  std::function<absl::StatusOr<std::vector<KvBenchRow>>(const KvBenchShape&)> extra_rows;
};

// RunKvStoreBench: runs everything, prints the table to `out`, returns rows.
absl::StatusOr<std::vector<KvBenchRow>> RunKvStoreBench(const KvBenchOptions& options,
                                                        std::FILE* out);

}  // namespace ragkv::kvstore

#endif  // RAGKV_BENCH_KVSTORE_BENCH_KVSTORE_H_
