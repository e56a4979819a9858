// ragkv_bench_kvstore: runs kvstore/bench_kvstore.h and prints its table.
//   ragkv_bench_kvstore [--dir=PATH] [--chunks=N] [--threads=N] [--repeats=N] [--small]
// --small: only the stories260K-sized shape (quick). Put --dir on the disk
// under test (not tmpfs: the SSD baseline needs O_DIRECT).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kvstore/bench_kvstore.h"

int main(int argc, char** argv) {
  ragkv::kvstore::KvBenchOptions o;
  bool small = false;
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
    } else {
      std::fprintf(stderr, "usage: %s [--dir=PATH] [--chunks=N] [--threads=N] [--repeats=N] [--small]\n",
                   argv[0]);
      return 2;
    }
  }
  if (small) o.shapes = {ragkv::kvstore::KvBenchShape{"stories260k-512tok", 512, 5, 4, 8}};
  auto rows = ragkv::kvstore::RunKvStoreBench(o, stdout);
  if (!rows.ok()) {
    std::fprintf(stderr, "kvstore bench failed: %s\n", rows.status().ToString().c_str());
    return 1;
  }
  return 0;
}
