// ragkv_bench_blend: blend time vs full prefill (blend/bench_blend.h).
//   ragkv_bench_blend [--model synthetic:...] [--chunks 6] [--chunk-tokens 512]
//     [--query 32] [--ratio 0.15 (repeatable)] [--repeats 3] [--kv f16|f32|bf16]
//     [--memory] [--no-overlap] [--threads 2]
#include <cstdlib>
#include <iostream>
#include <string>

#include "blend/bench_blend.h"
#include "kernels/cpu.h"

int main(int argc, char** argv) {
  ragkv::blend::BlendBenchOptions o;
  int threads = 2;
  bool ratios_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "missing value for " << a << "\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") o.model_spec = next();
    else if (a == "--chunks") o.chunks = std::stoi(next());
    else if (a == "--chunk-tokens") o.chunk_tokens = std::stoi(next());
    else if (a == "--query") o.query_tokens = std::stoi(next());
    else if (a == "--ratio") {
      if (!ratios_given) o.ratios.clear();
      ratios_given = true;
      o.ratios.push_back(std::stod(next()));
    } else if (a == "--repeats") o.repeats = std::stoi(next());
    else if (a == "--kv") {
      const std::string d = next();
      o.kv_dtype = d == "f32" ? ragkv::kernels::DType::kF32
                   : d == "bf16" ? ragkv::kernels::DType::kBF16
                                 : ragkv::kernels::DType::kF16;
    } else if (a == "--memory") o.from_store = false;
    else if (a == "--no-overlap") o.overlap_loading = false;
    else if (a == "--threads") threads = std::stoi(next());
    else {
      std::cerr << "unknown flag " << a << "\n";
      return 2;
    }
  }
  ragkv::kernels::SetMaxThreads(threads);
  auto r = ragkv::blend::RunBlendBench(o, std::cout);
  if (!r.ok()) {
    std::cerr << r.status() << "\n";
    return 1;
  }
  return 0;
}
