#include "tests/support/shared_redis.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/support/run_command.h"

namespace ragkv::testing {
namespace {

// ConfigGet: the value of `param` (CONFIG GET, --raw: "param\nvalue\n").
absl::StatusOr<std::string> ConfigGet(const std::string& host, const std::string& port,
                                      const std::string& param) {
  const std::string cmd =
      absl::StrCat("redis-cli -h ", host, " -p ", port, " --raw CONFIG GET ", param, " 2>&1");
  std::string out;
  const int rc = RunCommand(cmd, &out);
  std::vector<std::string> lines = absl::StrSplit(out, '\n');
  if (rc != 0 || lines.empty() || lines[0] != param) {
    return absl::UnavailableError(absl::StrCat("RAGKV_TEST_REDIS ", host, ":", port,
                                               ": CONFIG GET ", param, " answered '",
                                               absl::StripAsciiWhitespace(out), "'"));
  }
  return lines.size() > 1 ? lines[1] : std::string();
}

}  // namespace

absl::StatusOr<std::string> SharedTestRedis() {
  const char* env = std::getenv("RAGKV_TEST_REDIS");
  if (env == nullptr || *env == '\0') return std::string();
  const std::string endpoint = env;
  const size_t colon = endpoint.rfind(':');
  int port = 0;
  const std::string host = endpoint.substr(0, colon == std::string::npos ? 0 : colon);
  const bool host_ok = !host.empty() && host.find_first_not_of(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == std::string::npos;
  if (colon == std::string::npos || !host_ok ||
      !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("RAGKV_TEST_REDIS='", endpoint, "': expected host:port"));
  }
  const std::string port_text = std::to_string(port);
  absl::StatusOr<std::string> save = ConfigGet(host, port_text, "save");
  if (!save.ok()) return save.status();
  absl::StatusOr<std::string> aof = ConfigGet(host, port_text, "appendonly");
  if (!aof.ok()) return aof.status();
  if (!save->empty() || *aof != "no") {
    absl::StatusOr<std::string> dir = ConfigGet(host, port_text, "dir");
    return absl::FailedPreconditionError(absl::StrCat(
        "RAGKV_TEST_REDIS ", endpoint, " persists the test keys (save '", *save, "', appendonly ",
        *aof, ", dir ", dir.ok() ? *dir : "?",
        "): start it with --save \"\" --appendonly no --dir <tmp>, as .ci/run does"));
  }
  return endpoint;
}

}  // namespace ragkv::testing
