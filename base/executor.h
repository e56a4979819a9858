// executor.h: BoundedExecutor, the fixed thread pool that runs the
// sidecar's heavy work (FAISS searches, SSD reads, model forward passes,
// blending) off gRPC's reaction threads.
//
// Bounded on both axes: `threads` workers and at most `max_queue` waiting
// tasks. TrySubmit never blocks: when the queue is full it returns
// ResourceExhausted, which the services turn into RESOURCE_EXHAUSTED so an
// overloaded sidecar sheds load instead of queueing without bound.
//
// Thread safety: all methods are thread-safe. Tasks must not block waiting
// for other tasks of the same executor (no nested pools: docs/style.md, "Threads").
#ifndef RAGKV_BASE_EXECUTOR_H_
#define RAGKV_BASE_EXECUTOR_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/sync.h"

namespace ragkv {

class BoundedExecutor {
 public:
  struct Options {
    int threads = 2;          // worker threads (>= 1)
    size_t max_queue = 1024;  // waiting tasks beyond the running ones (>= 1)
  };

  // Create: InvalidArgument for threads < 1 or max_queue < 1.
  static absl::StatusOr<std::unique_ptr<BoundedExecutor>> Create(Options options);
  ~BoundedExecutor();  // Shutdown()

  BoundedExecutor(const BoundedExecutor&) = delete;
  BoundedExecutor& operator=(const BoundedExecutor&) = delete;

  // TrySubmit: queues `task`. ResourceExhausted when max_queue tasks are
  // already waiting; FailedPrecondition after Shutdown. On error the task is
  // destroyed without running.
  absl::Status TrySubmit(absl::AnyInvocable<void() &&> task);

  // Shutdown: stops accepting tasks, runs every task already queued, joins
  // the workers. Idempotent.
  void Shutdown();

  size_t queued() const;
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  explicit BoundedExecutor(Options options) : options_(options) {}
  void WorkerLoop();

  const Options options_;
  mutable Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace ragkv

#endif  // RAGKV_BASE_EXECUTOR_H_
