#include "cli/command.h"

#include <CLI/CLI.hpp>

#include <cstdio>

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

}  // namespace ragkv::cli
