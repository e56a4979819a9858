// forward.cc: commands that run in another binary, which they exec with
// their arguments (so exit code, stdout and stderr are that binary's own).
// - `ragkv llama` and `ragkv bench engine` run in ragkv-llama, the one binary
//   that links llama.cpp (so `ragkv serve` never loads it: docs/engines.md);
// - `ragkv bench ...` runs in ragkv-bench, the benchmark binary, which links
//   the harnesses of bench/ and the test-support redis-server starter, so
//   that the production `ragkv` links neither (docs/architecture.md).
// The binary is found next to this one (/proc/self/exe), or at the path in
// the environment variable named per target (RAGKV_LLAMA_BIN,
// RAGKV_BENCH_BIN). When it cannot be executed the command exits 2 with a
// message naming the binary and how to build it.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"

namespace ragkv::cli {
namespace {

// ForwardTarget: where a forwarding command goes.
struct ForwardTarget {
  const char* command;  // as the user typed it, for messages ("bench engine")
  const char* tool;     // the binary's file name ("ragkv-llama")
  const char* env;      // environment variable overriding its path
  const char* sub;      // its subcommand to run (nullptr: none, args as is)
  const char* missing;  // why it may be absent and how to get it
  bool pass_globals;    // forward ragkv's GlobalFlags (cli/command.h)
};

std::string ToolPath(const ForwardTarget& t) {
  if (const char* e = std::getenv(t.env); e != nullptr && *e) return e;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / t.tool).string();
}

class ForwardCommand : public Command {
 public:
  explicit ForwardCommand(const ForwardTarget& target) : t_(target) {}
  void Register(CLI::App* cmd) override {
    cmd->prefix_command();  // every argument goes to the target as is
    cmd->set_help_flag();
    app_ = cmd;
  }
  int Run() override {
    const std::string bin = ToolPath(t_);
    std::vector<std::string> args = {bin};
    if (t_.pass_globals) AppendGlobalFlags(app_->get_parent(), &args);
    if (t_.sub != nullptr) args.push_back(t_.sub);
    for (const std::string& a : app_->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(nullptr);
    ::execv(bin.c_str(), argv.data());
    std::fprintf(stderr, "ragkv %s: cannot run %s (%s): %s, or set %s\n", t_.command,
                 bin.c_str(), std::strerror(errno), t_.missing, t_.env);
    return 2;
  }

 private:
  const ForwardTarget t_;
  CLI::App* app_ = nullptr;
};

constexpr char kNoLlama[] =
    "this build has no llama.cpp engine; run scripts/setup-llamacpp and rebuild";
constexpr char kNoBench[] =
    "the benchmark binary ragkv-bench is not built; build it with "
    "`cmake --build build --target ragkv-bench` (it is written beside ragkv)";

}  // namespace

std::unique_ptr<Command> NewLlamaForwardCommand() {
  return std::make_unique<ForwardCommand>(
      ForwardTarget{"llama", "ragkv-llama", "RAGKV_LLAMA_BIN", "llama", kNoLlama, false});
}
std::unique_ptr<Command> NewBenchEngineForwardCommand() {
  return std::make_unique<ForwardCommand>(ForwardTarget{
      "bench engine", "ragkv-llama", "RAGKV_LLAMA_BIN", "bench-engine", kNoLlama, false});
}
std::unique_ptr<Command> NewBenchForwardCommand() {
  return std::make_unique<ForwardCommand>(
      ForwardTarget{"bench", "ragkv-bench", "RAGKV_BENCH_BIN", nullptr, kNoBench, true});
}

}  // namespace ragkv::cli
