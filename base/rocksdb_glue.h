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
#ifndef RAGKV_BASE_ROCKSDB_GLUE_H_
#define RAGKV_BASE_ROCKSDB_GLUE_H_

#include <rocksdb/env.h>
#include <rocksdb/listener.h>

#include <cstdarg>
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

}  // namespace ragkv

#endif  // RAGKV_BASE_ROCKSDB_GLUE_H_
