// sync.h: the project's locks -- thin wrappers over std::shared_mutex /
// std::condition_variable_any carrying Clang thread-safety annotations
// (ABSL_GUARDED_BY etc.), with absl::Mutex's Await.
//
// Why not absl::Mutex: Debian 12's libabsl is not built with ThreadSanitizer
// annotations, so every absl::Mutex critical section is a false "data race"
// under RAGKV_SANITIZE=thread. std::shared_mutex goes through pthreads,
// which TSan intercepts, so the concurrency tests (kvstore, the pools, the
// Blender, the store streams, the pipeline) stay TSan-checkable.
// Thread-safe by definition.
#ifndef RAGKV_BASE_SYNC_H_
#define RAGKV_BASE_SYNC_H_

#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace ragkv {

// Mutex: exclusive + shared (reader) lock. Also BasicLockable (lock/unlock)
// so std::condition_variable_any can wait on it. Releasing an exclusive
// lock wakes the threads in Await (absl::Mutex's conditions, re-checked
// whenever the state may have changed).
class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_.unlock();
    awaits_.notify_all();
  }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { Lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { Unlock(); }

  // Await: with the lock held exclusively, releases it until pred() holds
  // (pred runs with the lock held), then returns holding it again.
  template <typename Pred>
  void Await(Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    awaits_.wait(mu_, pred);
  }

 private:
  std::shared_mutex mu_;
  std::condition_variable_any awaits_;
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

}  // namespace ragkv

#endif  // RAGKV_BASE_SYNC_H_
