// cli.h: the `ragkv` subcommands other than serve (precompute, query, ...),
// registered on the CLI11 app by main.cc. Private to the ragkv binary.
#ifndef RAGKV_SERVICES_CLI_H_
#define RAGKV_SERVICES_CLI_H_

namespace CLI {
class App;
}

namespace ragkv::services {

// RegisterSubcommands: adds the subcommands and their flags to `app`.
void RegisterSubcommands(CLI::App* app);
// RunSubcommands: runs the parsed subcommand; the process exit code.
int RunSubcommands(const CLI::App& app);

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_CLI_H_
