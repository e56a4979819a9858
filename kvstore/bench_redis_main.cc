// ragkv_bench_redis: runs RedisTierBenchRows (bench_redis.h) against a
// running Redis server and prints one line per row.
//
//   ragkv_bench_redis HOST:PORT [REPEATS] [--tune-malloc] [--small|--large]
//
// --small / --large: only the stories260K shape / only the 64 MiB shapes.
// --tune-malloc: glibc keeps freed large blocks (M_MMAP_THRESHOLD 32 MiB,
// M_TRIM_THRESHOLD 1 GiB) as a sidecar's main may do; then raw hiredis no
// longer pays fresh page faults per read either.
//
// Shapes: llama-8B-like 512x32x8x128 fp16 (64 MiB) with the default 8 MiB
// split size and with 1 MiB (every layer split in 3 values), and stories260K
// 512x5x4x8.
#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>

#include "kvstore/bench_redis.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s HOST:PORT [REPEATS] [--tune-malloc] [--small|--large]\n",
                 argv[0]);
    return 2;
  }
  ragkv::kvstore::RedisBenchOptions o;
  o.endpoint = argv[1];
  bool tune = false, small_only = false, large_only = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--small") == 0) {
      small_only = true;
    } else if (std::strcmp(argv[i], "--large") == 0) {
      large_only = true;
    } else if (std::strcmp(argv[i], "--tune-malloc") == 0) {
      tune = true;
    } else {
      o.repeats = std::atoi(argv[i]);
    }
  }
  if (tune && (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1)) {
    std::fprintf(stderr, "warning: mallopt refused the tuning\n");
  }
  std::printf("malloc tuning: %s\n", tune ? "on" : "off");
  struct Case {
    ragkv::kvstore::KvBenchShape shape;
    uint64_t max_value_bytes;
  };
  const Case cases[] = {
      {{"llama8b-512tok", 512, 32, 8, 128}, uint64_t{8} << 20},
      {{"llama8b-512tok", 512, 32, 8, 128}, uint64_t{1} << 20},
      {{"stories260K-512tok", 512, 5, 4, 8}, uint64_t{8} << 20},
  };
  std::printf("%-20s %-42s %9s %9s %7s %s\n", "shape", "what", "value", "baseline", "ratio",
              "baseline what");
  int rc = 0;
  for (const Case& c : cases) {
    const bool is_small = c.shape.layers < 32;
    if ((small_only && !is_small) || (large_only && is_small)) continue;
    o.max_value_bytes = c.max_value_bytes;
    auto rows = ragkv::kvstore::RedisTierBenchRows(c.shape, o);
    if (!rows.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.shape.name.c_str(), rows.status().ToString().c_str());
      rc = 1;
      continue;
    }
    for (const auto& r : *rows) {
      std::printf("%-20s %-42s %9.3f %9.3f %7.3f %s %s\n", r.shape.c_str(), r.what.c_str(), r.value,
                  r.baseline, r.ratio(), r.unit.c_str(), r.baseline_what.c_str());
    }
  }
  return rc;
}
