// ragkv_bench_kvstore: runs kvstore/bench_kvstore.h and prints its table.
//   ragkv_bench_kvstore [--dir=PATH] [--chunks=N] [--threads=N] [--repeats=N] [--small|--large]
// --small: only the stories260K-sized shape (quick); --large: only the
// 64 MiB llama-8B-like shape. --no-malloc-tuning: skip
// TuneMallocForLargeValues (to measure its effect). Put --dir on the disk
// under test (not tmpfs: the SSD baseline needs O_DIRECT).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cpu.h"
#include "kvstore/bench_kvstore.h"
#include "kvstore/process_tuning.h"

int main(int argc, char** argv) {
  ragkv::kvstore::KvBenchOptions o;
  bool small = false;
  bool tune_malloc = true;
  bool large = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&a](const char* flag) -> const char* {
      const std::string f = std::string(flag) + "=";
      return a.rfind(f, 0) == 0 ? a.c_str() + f.size() : nullptr;
    };
    if (const char* v = val("--dir")) {
      o.dir = v;
    } else if (const char* v = val("--chunks")) {
      o.chunks = std::atoi(v);
    } else if (const char* v = val("--threads")) {
      o.threads = std::atoi(v);
    } else if (const char* v = val("--repeats")) {
      o.repeats = std::atoi(v);
    } else if (a == "--small") {
      small = true;
    } else if (a == "--large") {
      large = true;
    } else if (a == "--no-malloc-tuning") {
      tune_malloc = false;
    } else {
      std::fprintf(stderr, "usage: %s [--dir=PATH] [--chunks=N] [--threads=N] [--repeats=N] [--small|--large] [--no-malloc-tuning]\n",
                   argv[0]);
      return 2;
    }
  }
  // The store bench measures I/O paths, not kernels: decode runs on one
  // kernel thread (no OpenMP spin-waiting on a shared machine).
  ragkv::kernels::SetMaxThreads(1);
  if (tune_malloc && !ragkv::kvstore::TuneMallocForLargeValues()) {
    std::fprintf(stderr, "warning: mallopt refused the malloc tuning\n");
  }
  std::printf("malloc tuning (kvstore/process_tuning.h): %s\n", tune_malloc ? "on" : "off");
  if (large) o.shapes = {ragkv::kvstore::KvBenchShape{"llama8b-512tok", 512, 32, 8, 128}};
  if (small) o.shapes = {ragkv::kvstore::KvBenchShape{"stories260k-512tok", 512, 5, 4, 8}};
  auto rows = ragkv::kvstore::RunKvStoreBench(o, stdout);
  if (!rows.ok()) {
    std::fprintf(stderr, "kvstore bench failed: %s\n", rows.status().ToString().c_str());
    return 1;
  }
  return 0;
}
