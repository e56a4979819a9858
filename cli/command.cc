#include "cli/command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "kernels/cpu.h"

namespace ragkv::cli {

void RegisterTable(CLI::App* app, const CommandEntry* table, int n,
                   std::unique_ptr<Command>* commands) {
  for (int i = 0; i < n; ++i) {
    CLI::App* sub = app->add_subcommand(table[i].name, table[i].help);
    commands[i] = table[i].make();
    commands[i]->Register(sub);
  }
}

int RunParsed(CLI::App* app, const CommandEntry* table, int n,
              const std::unique_ptr<Command>* commands) {
  for (int i = 0; i < n; ++i) {
    if (app->get_subcommand(table[i].name)->parsed()) return commands[i]->Run();
  }
  std::fprintf(stderr, "ragkv: unknown subcommand\n");
  return 2;
}

void AddGlobalFlags(CLI::App* app, GlobalFlags* flags) {
  app->add_option(kGlobalFlagNames[0], flags->log_level, "debug|info|warning|error");
  app->add_option(kGlobalFlagNames[1], flags->kernel_threads,
                  "OpenMP/BLAS threads per kernel call")
      ->capture_default_str();
}

void ApplyGlobalFlags(const GlobalFlags& flags) {
  const std::string& level = flags.log_level;
  if (level == "debug") SetMinLogLevel(LogLevel::kDebug);
  if (level == "warning") SetMinLogLevel(LogLevel::kWarning);
  if (level == "error") SetMinLogLevel(LogLevel::kError);
  kernels::SetMaxThreads(std::max(1, flags.kernel_threads));
}

}  // namespace ragkv::cli
