// cli.h: the `ragkv` subcommands other than serve (precompute, query, ...),
// registered on the CLI11 app by main.cc. Private to the ragkv binary.
#ifndef RAGKV_SERVICES_CLI_H_
#define RAGKV_SERVICES_CLI_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace ragkv::services {

// AuthTokenFlags: the ways a command gets its bearer token, in order of
// precedence: --auth-token-file PATH (the file's content, trailing
// whitespace/newline stripped; refused when other users may read or write
// it), --auth-token TOKEN (works, but is visible in `ps`: a warning is
// logged), then the environment variable RAGKV_AUTH_TOKEN. Giving both
// flags is an error. None of them: no token.
struct AuthTokenFlags {
  std::string token;
  std::string file;
};
// AddAuthTokenOptions: registers --auth-token and --auth-token-file on `cmd`.
void AddAuthTokenOptions(CLI::App* cmd, AuthTokenFlags* flags, std::string_view what);
// ResolveAuthToken: the token per the rules above ("" = none).
// InvalidArgument: both flags, unreadable/unsafe/empty file. `command`
// prefixes the warning. Never logs the token.
absl::StatusOr<std::string> ResolveAuthToken(const AuthTokenFlags& flags,
                                             std::string_view command);
// ScrubTokenArgs: overwrites the value of every --auth-token argument in
// argv with 'x' so that later reads of /proc/PID/cmdline (ps) do not show
// it. Call after parsing. Does not help against a `ps` run before it.
void ScrubTokenArgs(int argc, char** argv);

// BenchCommand: the `bench` subcommand of `app`, created on first use (each
// bench family registers its own `bench X` under it).
CLI::App* BenchCommand(CLI::App* app);

// RegisterSubcommands: adds the subcommands and their flags to `app`.
void RegisterSubcommands(CLI::App* app);
// RunSubcommands: runs the parsed subcommand; the process exit code.
int RunSubcommands(const CLI::App& app);

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_CLI_H_
