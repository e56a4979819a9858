#include "services/cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>

namespace ragkv::services {

void RegisterSubcommands(CLI::App* app) {}

int RunSubcommands(const CLI::App& app) {
  std::fprintf(stderr, "ragkv: unknown subcommand\n");
  return 2;
}

}  // namespace ragkv::services
