// sync.h: the locks of kvstore -- thin wrappers over std::shared_mutex /
// std::mutex carrying Clang thread-safety annotations (ABSL_GUARDED_BY etc.).
//
// Why not absl::Mutex: Debian 12's libabsl is not built with ThreadSanitizer
// annotations, so every absl::Mutex critical section is a false "data race"
// under RAGKV_SANITIZE=thread. std::shared_mutex goes through pthreads,
// which TSan intercepts, so the kvstore concurrency tests stay TSan-checkable.
// Thread-safe by definition.
#ifndef RAGKV_KVSTORE_INTERNAL_SYNC_H_
#define RAGKV_KVSTORE_INTERNAL_SYNC_H_

#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace ragkv::kvstore::internal {

// Mutex: exclusive + shared (reader) lock. Also BasicLockable (lock/unlock)
// so std::condition_variable_any can wait on it.
class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::shared_mutex mu_;
};

// MutexLock: scoped exclusive lock.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// ReaderMutexLock: scoped shared lock.
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* mu_;
};

// CondVar: waits with a Mutex held exclusively (via MutexLock).
class CondVar {
 public:
  // Wait: blocks until pred() holds; `mu` must be held exclusively.
  template <typename Pred>
  void Wait(Mutex* mu, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    cv_.wait(*mu, pred);
  }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_INTERNAL_SYNC_H_
