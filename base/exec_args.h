// exec_args.h: an argv and envp for execve, built before fork. The child of
// a threaded process may only make async-signal-safe calls until it execs:
// a malloc there can wait forever on a lock another thread held at the
// fork (a test's server child hung this way under ASan). So every string
// and pointer array is made in the parent, and the child calls execve only.
#ifndef RAGKV_BASE_EXEC_ARGS_H_
#define RAGKV_BASE_EXEC_ARGS_H_

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace ragkv {

class ExecArgs {
 public:
  // `args`: argv (args[0] the program's path); `env`: NAME=value entries
  // added to this process's environment, replacing a variable of the name.
  explicit ExecArgs(std::vector<std::string> args, std::vector<std::string> env = {})
      : args_(std::move(args)), env_(std::move(env)) {
    for (std::string& a : args_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    for (std::string& e : env_) envp_.push_back(e.data());
    for (char** e = environ; *e != nullptr; ++e) {
      if (!Replaced(*e)) envp_.push_back(*e);
    }
    envp_.push_back(nullptr);
  }
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  // InPath: `program` found in $PATH when it names no directory (execvp's
  // lookup, done in the parent: execvp is not async-signal-safe); else,
  // or when not found, `program` itself.
  static std::string InPath(const std::string& program) {
    if (program.find('/') != std::string::npos) return program;
    const char* env = std::getenv("PATH");
    const std::string path = env != nullptr ? env : "/usr/bin:/bin";
    for (size_t b = 0, e = 0; b <= path.size(); b = e + 1) {
      e = std::min(path.find(':', b), path.size());
      const std::string cand = path.substr(b, e - b) + "/" + program;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    return program;
  }

  // Exec: in the child; returns only when execve failed (errno says why).
  void Exec() const { ::execve(argv_[0], argv_.data(), envp_.data()); }
  const char* path() const { return argv_[0] != nullptr ? argv_[0] : ""; }

 private:
  bool Replaced(const char* entry) const {
    const size_t n = std::strcspn(entry, "=") + 1;  // the name and '='
    for (const std::string& e : env_) {
      if (e.size() >= n && e.compare(0, n, entry, n) == 0) return true;
    }
    return false;
  }

  std::vector<std::string> args_, env_;
  std::vector<char*> argv_, envp_;
};

}  // namespace ragkv

#endif  // RAGKV_BASE_EXEC_ARGS_H_
