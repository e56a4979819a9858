// rocksdb_glue.h: how every RocksDB database of ragkv (the catalogue, the
// SSD tier) logs and recovers. Header-only; include it only where RocksDB is
// linked.
//
// RocksLogger: RocksDB's info log goes to ragkv's log (WARN and above;
// INFO/DEBUG are dropped) instead of a LOG file inside the database
// directory. That file shares the database's disk: when the disk fills,
// its failed append left Debian's RocksDB 7.8 (built with assertions)
// aborting the process on the next log line. RocksDB's own reports of
// dropped or damaged data (WAL recovery, corruption) are WARN/ERROR, so
// they now reach the sidecar's log.
//
// NoAutoRecovery: vetoes RocksDB's automatic recovery from a background
// error (its flush-and-resume path runs through the writer that failed);
// the owners reopen the database themselves once the disk has room.
//
// DiskTooFullToReopen: the "once the disk has room" test of those reopens.
#ifndef RAGKV_BASE_ROCKSDB_GLUE_H_
#define RAGKV_BASE_ROCKSDB_GLUE_H_

#include <sys/statvfs.h>

#include <rocksdb/env.h>
#include <rocksdb/listener.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "base/log.h"

namespace ragkv {

class RocksLogger : public rocksdb::Logger {
 public:
  explicit RocksLogger(std::string name)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), name_(std::move(name)) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < rocksdb::InfoLogLevel::WARN_LEVEL) return;
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), format, ap);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) {
      RAGKV_LOG(ERROR) << "rocksdb " << name_ << ": " << buf;
    } else {
      RAGKV_LOG(WARNING) << "rocksdb " << name_ << ": " << buf;
    }
  }

 private:
  std::string name_;
};

class NoAutoRecovery : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

// kReopenFreeBytes: the free space (bytes available to unprivileged users)
// the file system of a database needs before its owner reopens it after a
// write error. 4 MiB.
inline constexpr uint64_t kReopenFreeBytes = uint64_t{4} << 20;

// DiskTooFullToReopen: true when the file system holding `path` has less
// than kReopenFreeBytes free; false when it has more or statvfs fails (the
// reopen is then tried, and fails on its own if the disk is still full).
inline bool DiskTooFullToReopen(const std::string& path) {
  struct statvfs st;
  return ::statvfs(path.c_str(), &st) == 0 &&
         uint64_t{st.f_bavail} * st.f_frsize < kReopenFreeBytes;
}

}  // namespace ragkv

#endif  // RAGKV_BASE_ROCKSDB_GLUE_H_
