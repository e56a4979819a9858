// main.cc: the `ragkv` command line. The commands come from one table
// (kCommands); each lives in its own file of cli/ and owns its flags.
// Global flags (--log-level, --kernel-threads) are handled here.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>

#include "base/log.h"
#include "cli/command.h"
#include "cli/flags.h"
#include "kernels/cpu.h"

namespace {

using ragkv::cli::CommandEntry;

const CommandEntry kCommands[] = {
    {"serve", "run the sidecar (all services by default)", ragkv::cli::NewServeCommand},
    {"generate", "run the model on a prompt (llama2.c run.c style)",
     ragkv::cli::NewGenerateCommand},
    {"bench", "benchmarks", ragkv::cli::NewBenchCommand},
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

void ApplyLogLevel(const std::string& level) {
  if (level == "debug") ragkv::SetMinLogLevel(ragkv::LogLevel::kDebug);
  if (level == "warning") ragkv::SetMinLogLevel(ragkv::LogLevel::kWarning);
  if (level == "error") ragkv::SetMinLogLevel(ragkv::LogLevel::kError);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ragkv: RAG KV-cache sidecar (precompute, tiered store, CacheBlend fusion)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug|info|warning|error");
  // Request-level parallelism (executor workers, precompute workers) is the
  // main axis; kernels default to 1 OpenMP/BLAS thread each so the two never
  // multiply into oversubscription (style.md: no nested pools).
  int kernel_threads = 1;
  app.add_option("--kernel-threads", kernel_threads, "OpenMP/BLAS threads per kernel call")
      ->capture_default_str();
  std::unique_ptr<ragkv::cli::Command> commands[kNumCommands];
  ragkv::cli::RegisterTable(&app, kCommands, kNumCommands, commands);

  CLI11_PARSE(app, argc, argv);
  ragkv::cli::ScrubTokenArgs(argc, argv);  // keep it out of later `ps` output
  ApplyLogLevel(log_level);
  ragkv::kernels::SetMaxThreads(std::max(1, kernel_threads));
  return ragkv::cli::RunParsed(&app, kCommands, kNumCommands, commands);
}
