#include "cli/command.h"
#include "cli/flags.h"

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

int ParseAndRun(CLI::App* app, int argc, char** argv, const GlobalFlags& globals,
                const CommandEntry* table, int n, const std::unique_ptr<Command>* commands) {
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app->exit(e) == 0 ? 0 : 2;
  }
  ScrubTokenArgs(argc, argv);  // keep it out of later `ps` output
  ApplyGlobalFlags(globals);
  return RunParsed(app, table, n, commands);
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
                  "OpenMP/BLAS threads per kernel call (0: one per hardware thread)")
      ->capture_default_str();
}

void AppendGlobalFlags(const CLI::App* root, std::vector<std::string>* args) {
  if (root == nullptr) return;
  for (const char* flag : kGlobalFlagNames) {
    const CLI::Option* o = root->get_option_no_throw(flag);
    if (o == nullptr || o->count() == 0) continue;
    for (const std::string& v : o->results()) args->insert(args->end(), {flag, v});
  }
}

void ApplyGlobalFlags(const GlobalFlags& flags) {
  const std::string& level = flags.log_level;
  if (level == "debug") SetMinLogLevel(LogLevel::kDebug);
  if (level == "warning") SetMinLogLevel(LogLevel::kWarning);
  if (level == "error") SetMinLogLevel(LogLevel::kError);
  if (flags.kernel_threads > 0) kernels::SetMaxThreads(flags.kernel_threads);
}

}  // namespace ragkv::cli
