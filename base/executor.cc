#include "base/executor.h"

#include <utility>

namespace ragkv {

absl::StatusOr<std::unique_ptr<BoundedExecutor>> BoundedExecutor::Create(Options options) {
  if (options.threads < 1) return absl::InvalidArgumentError("executor: threads must be >= 1");
  if (options.max_queue < 1) return absl::InvalidArgumentError("executor: max_queue must be >= 1");
  std::unique_ptr<BoundedExecutor> ex(new BoundedExecutor(options));
  ex->workers_.reserve(options.threads);
  for (int i = 0; i < options.threads; ++i) {
    ex->workers_.emplace_back([p = ex.get()] { p->WorkerLoop(); });
  }
  return ex;
}

BoundedExecutor::~BoundedExecutor() { Shutdown(); }

absl::Status BoundedExecutor::TrySubmit(absl::AnyInvocable<void() &&> task) {
  MutexLock lock(&mu_);
  if (stopping_) return absl::FailedPreconditionError("executor is shutting down");
  if (queue_.size() >= options_.max_queue) {
    return absl::ResourceExhaustedError("server busy: work queue full");
  }
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

void BoundedExecutor::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
}

size_t BoundedExecutor::queued() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

void BoundedExecutor::WorkerLoop() {
  for (;;) {
    absl::AnyInvocable<void() &&> task;
    {
      MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(ready);
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace ragkv
