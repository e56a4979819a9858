// ragkv_bench_prefill: standalone `ragkv bench prefill`.
//   ragkv_bench_prefill [--synthetic SPEC | --model PATH] [--tokens 512,2048,4096]
//                       [--repeats 3] [--sgemm-n 2048] [--threads N]
#include <iostream>

#include <CLI/CLI.hpp>

#include "model/bench_prefill.h"

int main(int argc, char** argv) {
  CLI::App app{"ragkv bench prefill: prefill throughput vs the sgemm roofline"};
  ragkv::model::PrefillBenchOptions o;
  std::string synthetic;
  app.add_option("--synthetic", synthetic, "layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000");
  app.add_option("--model", o.model, "model path (instead of --synthetic)");
  app.add_option("--tokens", o.tokens, "prompt lengths")->delimiter(',');
  app.add_option("--repeats", o.repeats, "timed runs per length");
  app.add_option("--sgemm-n", o.sgemm_n, "square sgemm size for the ceiling");
  app.add_option("--threads", o.threads, "kernel threads (0 = all cores)");
  CLI11_PARSE(app, argc, argv);
  if (!synthetic.empty()) o.model = "synthetic:" + synthetic;
  auto r = ragkv::model::RunPrefillBench(o);
  if (!r.ok()) {
    std::cerr << "error: " << r.status().message() << "\n";
    return 1;
  }
  ragkv::model::PrintPrefillBench(*r, std::cout);
  return 0;
}
