// llama_main.cc: ragkv-llama, the binary behind `ragkv llama`, `ragkv
// bench engine` and `ragkv serve --engine llama.cpp` (cli/llama_forward.cc execs it): the only one linking
// llama.cpp. Its commands come from one table, as in main.cc.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iterator>
#include <memory>

#include "cli/command.h"
#include "cli/serve.h"
#include "kernels/blas_core.h"

namespace {

using ragkv::cli::CommandEntry;

const CommandEntry kCommands[] = {
    {"llama", "retrieve + blend through the sidecar, generate with llama.cpp",
     ragkv::cli::NewLlamaCommand},
    {"bench-engine", "TTFT and quality of every strategy inside llama.cpp",
     ragkv::cli::NewBenchEngineCommand},
    {"serve", "the sidecar with the OpenAI-compatible HTTP server and llama.cpp (ragkv serve "
              "--engine llama.cpp)",
     ragkv::cli::NewLlamaServeCommand},
};
constexpr int kNumCommands = static_cast<int>(std::size(kCommands));

}  // namespace

int main(int argc, char** argv) {
  ragkv::kernels::RestartWithBlasCore(argv);  // docs/kernels.md "The OpenBLAS core"
  CLI::App app{"ragkv-llama: ragkv's fused KV inside llama.cpp"};
  app.require_subcommand(1);
  // ragkv's global flags, which `ragkv serve --engine` forwards.
  ragkv::cli::GlobalFlags globals;
  globals.kernel_threads = 0;
  ragkv::cli::AddGlobalFlags(&app, &globals);
  std::unique_ptr<ragkv::cli::Command> commands[kNumCommands];
  ragkv::cli::RegisterTable(&app, kCommands, kNumCommands, commands);
  return ragkv::cli::ParseAndRun(&app, argc, argv, globals, kCommands, kNumCommands, commands);
}
