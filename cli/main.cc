// main.cc: the `ragkv` command line. The commands come from one table
// (kCommands); each lives in its own file of cli/ and owns its flags.
// Global flags (--log-level, --kernel-threads: cli/command.h) are handled
// here. `bench`, `llama` run in other binaries (ragkv-bench, ragkv-llama:
// cli/forward.cc), so this one links no benchmark, test or llama.cpp code.
#include <CLI/CLI.hpp>

#include <iterator>
#include <memory>

#include "cli/command.h"
#include "kernels/blas_core.h"

namespace {

using ragkv::cli::CommandEntry;

const CommandEntry kCommands[] = {
    {"serve", "run the sidecar (all services by default)", ragkv::cli::NewServeCommand},
    {"generate", "run the model on a prompt (llama2.c run.c style)",
     ragkv::cli::NewGenerateCommand},
    {"bench", "benchmarks (run by the ragkv-bench binary)",
     ragkv::cli::NewBenchForwardCommand},
    {"precompute", "ingest a corpus and store every chunk's KV (resumable, shardable)",
     ragkv::cli::NewPrecomputeCommand},
    {"query", "ask the reference engine; prints chunks, answer, TTFT",
     ragkv::cli::NewQueryCommand},
    {"plan", "roofline TTFT prediction per strategy and tier", ragkv::cli::NewPlanCommand},
    {"tokenize", "the tokens of a text under a checkpoint's tokenizer (like llama-tokenize)",
     ragkv::cli::NewTokenizeCommand},
    {"llama", "retrieve + blend through the sidecar, generate with llama.cpp (ragkv-llama)",
     ragkv::cli::NewLlamaForwardCommand},
    {"repair", "salvage a damaged data dir (catalogue RepairDB; damaged KV store moved aside)",
     ragkv::cli::NewRepairCommand},
    {"calibrate", "measure blending quality per model; the sidecar's quality gate (docs/quality_gate.md)",
     ragkv::cli::NewCalibrateCommand},
};
constexpr int kNumCommands = static_cast<int>(std::size(kCommands));

}  // namespace

int main(int argc, char** argv) {
  ragkv::kernels::RestartWithBlasCore(argv);  // docs/kernels.md "The OpenBLAS core"
  CLI::App app{"ragkv: RAG KV-cache sidecar (precompute, tiered store, CacheBlend fusion)"};
  app.require_subcommand(1);
  ragkv::cli::GlobalFlags globals;
  ragkv::cli::AddGlobalFlags(&app, &globals);
  std::unique_ptr<ragkv::cli::Command> commands[kNumCommands];
  ragkv::cli::RegisterTable(&app, kCommands, kNumCommands, commands);

  return ragkv::cli::ParseAndRun(&app, argc, argv, globals, kCommands, kNumCommands, commands);
}
