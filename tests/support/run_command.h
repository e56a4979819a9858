// run_command.h: RunCommand, a shell command's exit status and stdout, for
// tests that drive a program (`ragkv tokenize`, redis-cli). Header-only.
#ifndef RAGKV_TESTS_SUPPORT_RUN_COMMAND_H_
#define RAGKV_TESTS_SUPPORT_RUN_COMMAND_H_

#include <cstdio>
#include <string>

namespace ragkv::testing {

// RunCommand: runs `cmd` through /bin/sh, appends its stdout to *out and
// returns pclose's status (0: exited 0); -1 when it could not be started.
inline int RunCommand(const std::string& cmd, std::string* out) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out->append(buf, n);
  return ::pclose(p);
}

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_SUPPORT_RUN_COMMAND_H_
