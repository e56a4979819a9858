// bench_main.cc: ragkv-bench, the benchmark binary behind `ragkv bench ...`
// (cli/forward.cc execs it with the arguments after `bench`, and ragkv's
// global flags before them). It links the harnesses of bench/ and the
// test-support redis-server starter (the TTFT suite's private Redis tier),
// which the production `ragkv` must not (docs/architecture.md). The families
// come from one table, as ragkv's commands do in cli/main.cc; `engine` goes
// on to ragkv-llama, the one binary that links llama.cpp.
#include <CLI/CLI.hpp>

#include <iterator>
#include <memory>

#include "cli/command.h"
#include "kernels/blas_core.h"

namespace {

using ragkv::cli::CommandEntry;

const CommandEntry kBench[] = {
    {"retrieval", "answer recall of the retrieval configurations",
     ragkv::cli::NewBenchRetrievalCommand},
    {"ttft", "TTFT of every strategy x KV tier on the same prompts, under load, vs the planner",
     ragkv::cli::NewBenchTtftCommand},
    {"load", "closed-loop Search/GetChunk/Blend load against a running sidecar",
     ragkv::cli::NewBenchLoadCommand},
    {"prefill", "full-prefill tokens/s vs the same run's sgemm roofline",
     ragkv::cli::NewBenchPrefillCommand},
    {"kvstore", "RAM/SSD/Redis tier reads vs memcpy, O_DIRECT, hiredis",
     ragkv::cli::NewBenchKvstoreCommand},
    {"blend", "blend time vs full prefill, per-stage breakdown", ragkv::cli::NewBenchBlendCommand},
    {"quality", "KL / top-1 / dNLL of every strategy vs full prefill on self-sampled prompts",
     ragkv::cli::NewBenchQualityCommand},
    {"serve", "the OpenAI server (ragkv serve --engine llama.cpp) under load vs llama-server",
     ragkv::cli::NewBenchServeCommand},
    {"engine", "TTFT and quality of every strategy inside llama.cpp (ragkv-llama)",
     ragkv::cli::NewBenchEngineForwardCommand},
};
constexpr int kNumBench = static_cast<int>(std::size(kBench));

}  // namespace

int main(int argc, char** argv) {
  ragkv::kernels::RestartWithBlasCore(argv);  // docs/kernels.md "The OpenBLAS core"
  // Named as users type it: `ragkv bench` (ragkv's help lists it).
  CLI::App app{"ragkv bench: benchmarks (the ragkv-bench binary)", "ragkv bench"};
  app.require_subcommand(1);
  // ragkv's global flags, which `ragkv ... bench` forwards (same defaults).
  ragkv::cli::GlobalFlags globals;
  ragkv::cli::AddGlobalFlags(&app, &globals);
  std::unique_ptr<ragkv::cli::Command> commands[kNumBench];
  ragkv::cli::RegisterTable(&app, kBench, kNumBench, commands);

  return ragkv::cli::ParseAndRun(&app, argc, argv, globals, kBench, kNumBench, commands);
}
