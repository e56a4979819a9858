// llama_forward.cc: `ragkv llama` and `ragkv bench engine` run in
// ragkv-llama, the one binary that links llama.cpp (so `ragkv serve` never
// loads it: docs/engines.md); these commands exec it with their arguments.
// The binary is found next to this one, or at $RAGKV_LLAMA_BIN.
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

std::string LlamaToolPath() {
  if (const char* e = std::getenv("RAGKV_LLAMA_BIN"); e != nullptr && *e) return e;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "ragkv-llama").string();
}

class ForwardCommand : public Command {
 public:
  ForwardCommand(const char* name, const char* sub) : name_(name), sub_(sub) {}
  void Register(CLI::App* cmd) override {
    cmd->prefix_command();  // every argument goes to ragkv-llama as is
    cmd->set_help_flag();
    app_ = cmd;
  }
  int Run() override {
    const std::string bin = LlamaToolPath();
    std::vector<std::string> args = {bin, sub_};
    for (const std::string& a : app_->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    std::fprintf(stderr,
                 "ragkv %s: cannot run %s (%s): this build has no llama.cpp engine; run "
                 "scripts/setup-llamacpp and rebuild, or set RAGKV_LLAMA_BIN\n",
                 name_, bin.c_str(), std::strerror(errno));
    return 2;
  }

 private:
  const char* name_;
  const char* sub_;
  CLI::App* app_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> NewLlamaForwardCommand() {
  return std::make_unique<ForwardCommand>("llama", "llama");
}
std::unique_ptr<Command> NewBenchEngineForwardCommand() {
  return std::make_unique<ForwardCommand>("bench engine", "bench-engine");
}

}  // namespace ragkv::cli
