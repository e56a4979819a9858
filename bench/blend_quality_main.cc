// ragkv_bench_quality: blend quality vs full prefill (blend/bench_quality.h).
//   ragkv_bench_quality --model ../shared/models/stories260K.bin [--prompts 50]
//     [--seed 1] [--chunks 6] [--chunk-min 64] [--chunk-max 64] [--query 16]
//     [--continuation 32] [--kv f32|f16|bf16] [--gradual-steps 2]
//     [--gradual-factor 2] [--deviation k|v|kv] [--condition-prefix]
//     [--no-probe-scatter] [--chunk-head N] [--csv F] [--png F] [--threads 1]
#include <cstdlib>
#include <iostream>
#include <string>

#include "blend/bench_quality.h"
#include "kernels/cpu.h"

int main(int argc, char** argv) {
  ragkv::blend::QualityBenchOptions o;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "missing value for " << a << "\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") o.model_path = next();
    else if (a == "--prompts") o.prompts = std::stoi(next());
    else if (a == "--seed") o.seed = std::stoull(next());
    else if (a == "--chunks") o.chunks = std::stoi(next());
    else if (a == "--chunk-min") o.chunk_tokens_min = std::stoi(next());
    else if (a == "--chunk-max") o.chunk_tokens_max = std::stoi(next());
    else if (a == "--query") o.query_tokens = std::stoi(next());
    else if (a == "--continuation") o.continuation_tokens = std::stoi(next());
    else if (a == "--gradual-steps") o.blend.gradual_steps = std::stoi(next());
    else if (a == "--gradual-factor") o.blend.gradual_first_factor = std::stod(next());
    else if (a == "--first-check") o.blend.first_check_layer = std::stoi(next());
    else if (a == "--chunk-head") o.blend.chunk_head_tokens = std::stoi(next());
    else if (a == "--condition-prefix") o.condition_on_prefix = true;
    else if (a == "--no-probe-scatter") o.blend.scatter_probe_kv = false;
    else if (a == "--deviation") {
      const std::string d = next();
      o.blend.deviation = d == "k" ? ragkv::blend::Deviation::kKey
                          : d == "v" ? ragkv::blend::Deviation::kValue
                                     : ragkv::blend::Deviation::kBoth;
    } else if (a == "--kv") {
      const std::string d = next();
      o.kv_dtype = d == "f16" ? ragkv::kernels::DType::kF16
                   : d == "bf16" ? ragkv::kernels::DType::kBF16
                                 : ragkv::kernels::DType::kF32;
    } else if (a == "--csv") o.csv_path = next();
    else if (a == "--png") o.png_path = next();
    else if (a == "--threads") threads = std::stoi(next());
    else {
      std::cerr << "unknown flag " << a << "\n";
      return 2;
    }
  }
  if (o.model_path.empty()) {
    std::cerr << "usage: ragkv_bench_quality --model PATH [--prompts N] [--seed S] ...\n";
    return 2;
  }
  ragkv::kernels::SetMaxThreads(threads);
  auto r = ragkv::blend::RunQualityBench(o, std::cout);
  if (!r.ok()) {
    std::cerr << r.status() << "\n";
    return 1;
  }
  return 0;
}
