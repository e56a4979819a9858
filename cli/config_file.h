// config_file.h: `--config FILE` for a ragkv command: a TOML file (toml++,
// Debian's libtomlplusplus-dev; chosen over yaml-cpp because TOML has one
// obvious way to write a flat list of typed settings, keeps comments, and
// toml++ reports the line of every key) whose top-level keys are the
// command's long flag names without the dashes ("data-dir", or "data_dir").
// Values: strings, integers, floats, booleans, or arrays for repeatable
// flags. Flags given on the command line win over the file. An unknown key,
// a table, a date, a second value for a one-value flag or a secret (a key
// holding "token" or "password" that is not a "-file" path) is an error
// naming the key and its line. EffectiveConfig prints what the command will run
// with, as a config file (secrets redacted), so a deployment can keep its
// settings in version control: `ragkv serve --print-config > ragkv.toml`.
#ifndef RAGKV_CLI_CONFIG_FILE_H_
#define RAGKV_CLI_CONFIG_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace CLI {
class App;
}

namespace ragkv::cli {

// ApplyConfigFile: sets every option of `cmd` (parsed already) that the
// command line left unset from `path`. InvalidArgument naming path:line and
// the key for a bad file; NotFound when it cannot be read. With
// `shared_with` (another command's options), keys that only that command
// knows are skipped: `ragkv precompute --config ragkv.toml` reads the
// store settings of the server's file and ignores --listen and the like.
absl::Status ApplyConfigFile(CLI::App* cmd, const std::string& path,
                             const CLI::App* shared_with = nullptr);

// EffectiveConfig: every option of `cmd` with its value (given, or the
// default) as TOML, one `key = value` line each; options whose name holds
// "token" (not "token-file") are redacted; --config / --print-config /
// --help are left out.
std::string EffectiveConfig(const CLI::App* cmd);

}  // namespace ragkv::cli

#endif  // RAGKV_CLI_CONFIG_FILE_H_
