// flags.h: flag helpers shared by the `ragkv` commands (bearer tokens, byte
// sizes, KV dtypes, human-readable sizes). Private to the ragkv binary.
#ifndef RAGKV_CLI_FLAGS_H_
#define RAGKV_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "ragkv/v1/blend.pb.h"

namespace CLI {
class App;
}

namespace ragkv::cli {

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
// ReadSecretFile: the content of a secret file (trailing whitespace
// stripped). InvalidArgument, naming `flag` and the path, for a file that is
// not a regular readable file, that other users may read or write, or that
// is empty. Never logs the secret.
absl::StatusOr<std::string> ReadSecretFile(std::string_view flag, const std::string& path);
// ScrubTokenArgs: overwrites the value of every --auth-token argument in
// argv with 'x' so that later reads of /proc/PID/cmdline (ps) do not show
// it. Call after parsing. Does not help against a `ps` run before it.
void ScrubTokenArgs(int argc, char** argv);

// ParseKvDtype: "f32" | "f16" | "bf16"; false for anything else.
bool ParseKvDtype(const std::string& s, kernels::DType* out);
// HumanBytes: "1.5 MiB".
std::string HumanBytes(double bytes);

// ParseBlendMode: --mode full|full-prefill|prefix|prefix-caching|reuse|
// full-reuse|cacheblend|blend into opts' mode (cacheblend: recompute_ratio =
// ratio); false for any other name.
bool ParseBlendMode(const std::string& mode, float ratio, v1::BlendOptions* opts);

}  // namespace ragkv::cli

#endif  // RAGKV_CLI_FLAGS_H_
