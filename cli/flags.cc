#include "cli/flags.h"

#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/log.h"

namespace ragkv::cli {

void AddAuthTokenOptions(CLI::App* cmd, AuthTokenFlags* flags, std::string_view what) {
  cmd->add_option("--auth-token", flags->token,
                  std::string(what) +
                      " (visible in ps: prefer --auth-token-file or RAGKV_AUTH_TOKEN)");
  cmd->add_option("--auth-token-file", flags->file,
                  std::string(what) +
                      ", read from this file (mode 600; default: $RAGKV_AUTH_TOKEN)");
}

absl::StatusOr<std::string> ReadSecretFile(std::string_view flag, const std::string& path) {
  const std::string what = std::string(flag) + " " + path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(what + ": not a readable regular file");
  }
  if (st.st_mode & (S_IROTH | S_IWOTH)) {
    return absl::InvalidArgumentError(what + ": readable or writable by other users (chmod 600 it)");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(what + ": cannot read");
  std::string secret(absl::StripTrailingAsciiWhitespace(ss.str()));
  if (secret.empty()) return absl::InvalidArgumentError(what + ": empty");
  return secret;
}

absl::StatusOr<std::string> ResolveAuthToken(const AuthTokenFlags& flags,
                                             std::string_view command) {
  if (!flags.token.empty() && !flags.file.empty()) {
    return absl::InvalidArgumentError("give --auth-token or --auth-token-file, not both");
  }
  if (!flags.file.empty()) return ReadSecretFile("--auth-token-file", flags.file);
  if (!flags.token.empty()) {
    RAGKV_LOG(WARNING) << command
                       << ": --auth-token is visible to every local user in the process list "
                          "(ps); prefer --auth-token-file PATH or RAGKV_AUTH_TOKEN";
    return flags.token;
  }
  const char* env = std::getenv("RAGKV_AUTH_TOKEN");
  return std::string(env ? absl::StripTrailingAsciiWhitespace(env) : "");
}

void ScrubTokenArgs(int argc, char** argv) {
  static constexpr char kFlag[] = "--auth-token";
  const size_t n = sizeof(kFlag) - 1;
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (std::strcmp(a, kFlag) == 0 && i + 1 < argc) {
      std::memset(argv[i + 1], 'x', std::strlen(argv[i + 1]));
      ++i;
    } else if (std::strncmp(a, kFlag, n) == 0 && a[n] == '=') {
      std::memset(a + n + 1, 'x', std::strlen(a + n + 1));
    }
  }
}

bool ParseKvDtype(const std::string& s, kernels::DType* out) {
  if (s == "f32") {
    *out = kernels::DType::kF32;
  } else if (s == "f16") {
    *out = kernels::DType::kF16;
  } else if (s == "bf16") {
    *out = kernels::DType::kBF16;
  } else {
    return false;
  }
  return true;
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", b, units[u]);
}

bool ParseBlendMode(const std::string& mode, float ratio, v1::BlendOptions* opts) {
  if (mode == "full" || mode == "full-prefill") {
    opts->set_mode(v1::BLEND_MODE_FULL_PREFILL);
  } else if (mode == "prefix" || mode == "prefix-caching") {
    opts->set_mode(v1::BLEND_MODE_PREFIX_CACHING);
  } else if (mode == "reuse" || mode == "full-reuse") {
    opts->set_mode(v1::BLEND_MODE_FULL_REUSE);
  } else if (mode == "cacheblend" || mode == "blend") {
    opts->set_mode(v1::BLEND_MODE_CACHEBLEND);
    opts->set_recompute_ratio(ratio);
  } else {
    return false;
  }
  return true;
}

}  // namespace ragkv::cli
