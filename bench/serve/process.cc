#include "bench/serve/process.h"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/exec_args.h"

namespace ragkv::bench_serve {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// ExecChild: in the child: output to the log, exec; never returns. Only
// async-signal-safe calls here (`exec` was built before fork).
[[noreturn]] void ExecChild(const ExecArgs& exec, const char* log_path) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int fd = ::open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
  }
  exec.Exec();
  static constexpr char kFailed[] = ": exec failed\n";
  [[maybe_unused]] ssize_t n = ::write(2, exec.path(), std::strlen(exec.path()));
  n = ::write(2, kFailed, sizeof kFailed - 1);
  ::_exit(127);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv, const std::vector<std::string>& env,
    const std::string& log_path) {
  const ExecArgs exec(argv, env);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) ExecChild(exec, log_path.c_str());
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, log_path));
}

ChildProcess::~ChildProcess() { Stop(5); }

bool ChildProcess::Alive() {
  if (reaped_) return false;
  if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

int ChildProcess::Wait(double timeout_s) {
  for (const double end = Now() + timeout_s; Now() < end; Sleep(0.05)) {
    if (!Alive()) return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  Stop(1);
  return -1;
}

std::string ChildProcess::Log() const {
  std::ifstream f(log_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool ChildProcess::WaitForLog(const std::string& needle, double timeout_s) {
  for (const double end = Now() + timeout_s; Now() < end; Sleep(0.05)) {
    if (Log().find(needle) != std::string::npos) return true;
    if (!Alive()) return false;
  }
  return false;
}

void ChildProcess::Stop(double grace_s) {
  if (!Alive()) return;
  ::kill(pid_, SIGTERM);
  for (const double end = Now() + grace_s; Now() < end; Sleep(0.02)) {
    if (!Alive()) return;
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  reaped_ = true;
}

double ChildProcess::RssMb() const {
  std::ifstream f(absl::StrCat("/proc/", pid_, "/status"));
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return -1;
}

double ChildProcess::CpuSeconds() const {
  std::ifstream f(absl::StrCat("/proc/", pid_, "/stat"));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return -1;
  // After the command: state (field 3) ... utime (14), stime (15).
  std::istringstream in(text.substr(paren + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::atof(field.c_str());
    if (i == 15) stime = std::atof(field.c_str());
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", std::strerror(errno)));
  return static_cast<int>(ntohs(a.sin_port));
}

std::pair<int, std::string> HttpGet(int port, const std::string& path, double timeout_s) {
  httplib::Client c("127.0.0.1", port);
  const auto t = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  c.set_connection_timeout(t);
  c.set_read_timeout(t);
  auto r = c.Get(path.c_str());
  if (!r) return {-1, httplib::to_string(r.error())};
  return {r->status, r->body};
}

bool WaitHealthy(ChildProcess* child, int port, double timeout_s) {
  for (const double end = Now() + timeout_s; Now() < end; Sleep(0.1)) {
    if (HttpGet(port, "/health", 2).first == 200) return true;
    if (!child->Alive()) return false;
  }
  return false;
}

}  // namespace ragkv::bench_serve
