// log.h: the one logging facility of ragkv (stderr, leveled, thread-safe).
//
// RAGKV_LOG(INFO) << "text";   levels: DEBUG, INFO, WARNING, ERROR.
// The minimum level is process-wide (SetMinLogLevel, set from main only).
// Never log secrets (tokens, keys): callers redact before logging.
// A thread serving a request carries its id (ScopedRequestId; the sidecar
// sets it for every RPC's work and hands it to the threads that work
// spawns); every line logged meanwhile ends its prefix with
// "[request_id=...] ".
#ifndef RAGKV_BASE_LOG_H_
#define RAGKV_BASE_LOG_H_

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>

namespace ragkv {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

inline std::atomic<int>& MinLogLevelRef() {
  static std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
  return level;
}
// SetMinLogLevel: messages below `level` are dropped.
inline void SetMinLogLevel(LogLevel level) { MinLogLevelRef().store(static_cast<int>(level)); }
inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= MinLogLevelRef().load(std::memory_order_relaxed);
}

// CurrentRequestId: the id of the request this thread serves ("" for none).
inline std::string& CurrentRequestId() {
  thread_local std::string id;
  return id;
}

// ScopedRequestId: sets this thread's request id for its lifetime, then
// restores the previous one.
class ScopedRequestId {
 public:
  explicit ScopedRequestId(std::string id) : saved_(std::move(CurrentRequestId())) {
    CurrentRequestId() = std::move(id);
  }
  ~ScopedRequestId() { CurrentRequestId() = std::move(saved_); }
  ScopedRequestId(const ScopedRequestId&) = delete;
  ScopedRequestId& operator=(const ScopedRequestId&) = delete;

 private:
  std::string saved_;
};

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line) : level_(level) {
    static constexpr const char* kNames[] = {"D", "I", "W", "E"};
    const char* base = file;
    for (const char* p = file; *p; ++p)
      if (*p == '/') base = p + 1;
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char ts[32];
    std::strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
    stream_ << kNames[static_cast<int>(level)] << ' ' << ts << ' ' << base << ':' << line << "] ";
    if (!CurrentRequestId().empty()) stream_ << "[request_id=" << CurrentRequestId() << "] ";
  }
  ~LogMessage() {
    stream_ << '\n';
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    std::string s = stream_.str();
    std::fwrite(s.data(), 1, s.size(), stderr);
  }
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal
}  // namespace ragkv

#define RAGKV_LOG_LEVEL_DEBUG ::ragkv::LogLevel::kDebug
#define RAGKV_LOG_LEVEL_INFO ::ragkv::LogLevel::kInfo
#define RAGKV_LOG_LEVEL_WARNING ::ragkv::LogLevel::kWarning
#define RAGKV_LOG_LEVEL_ERROR ::ragkv::LogLevel::kError

#define RAGKV_LOG(level)                                  \
  if (!::ragkv::LogEnabled(RAGKV_LOG_LEVEL_##level)) {    \
  } else                                                  \
    ::ragkv::internal::LogMessage(RAGKV_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#endif  // RAGKV_BASE_LOG_H_
