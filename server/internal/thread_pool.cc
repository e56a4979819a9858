// Copyright ragkv authors.

#include "server/internal/thread_pool.h"

#include <algorithm>
#include <cstdio>
#include <system_error>
#include <utility>

namespace ragkv::server::internal {

DynamicThreadPool::DynamicThreadPool(int min_threads, int max_threads,
                                     std::chrono::milliseconds idle)
    : max_(std::max({1, min_threads, max_threads})), idle_time_(idle) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < std::max(1, min_threads); ++i) Start(false);
}

DynamicThreadPool::~DynamicThreadPool() { shutdown(); }

void DynamicThreadPool::enqueue(std::function<void()> fn) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (shutdown_) {  // not after shutdown (httplib does not): run it here
      lock.unlock();
      fn();
      return;
    }
    Reap();
    jobs_.push_back(std::move(fn));
    // A waiting worker takes each queued job; start one when none is left.
    if (static_cast<int>(jobs_.size()) > idle_ && live_ < max_) Start(true);
  }
  cv_.notify_one();
}

void DynamicThreadPool::shutdown() {
  std::list<std::thread> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
    all.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : all) t.join();
}

int DynamicThreadPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

int DynamicThreadPool::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void DynamicThreadPool::Start(bool extra) {
  try {
    threads_.emplace_back([this, extra] { Work(extra); });
  } catch (const std::system_error& e) {  // EAGAIN: a thread or memory limit
    // The job waits for a worker to come free, as with a fixed pool.
    if (!start_failed_) std::fprintf(stderr, "ragkv: cannot start an HTTP worker: %s\n", e.what());
    start_failed_ = true;
    return;
  }
  // The new worker takes mu_ before it looks at these.
  ++live_;
  ++idle_;
  peak_ = std::max(peak_, live_);
}

void DynamicThreadPool::Reap() {
  for (const std::thread::id id : ended_) {
    auto it = std::find_if(threads_.begin(), threads_.end(),
                           [id](const std::thread& t) { return t.get_id() == id; });
    if (it == threads_.end()) continue;  // shutdown took it
    it->join();                          // it has left Work: returns at once
    threads_.erase(it);
  }
  ended_.clear();
}

void DynamicThreadPool::Work(bool extra) {
  // Counted idle from Start on, and again after each task: a worker on its
  // way to the queue is one enqueue need not start.
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const auto ready = [this] { return !jobs_.empty() || shutdown_; };
    if (extra) {
      cv_.wait_for(lock, idle_time_, ready);
    } else {
      cv_.wait(lock, ready);
    }
    if (jobs_.empty()) {
      if (!shutdown_ && !extra) continue;
      --idle_;
      --live_;
      // Ended idle: the next enqueue joins it; at shutdown, shutdown does.
      if (!shutdown_) ended_.push_back(std::this_thread::get_id());
      return;
    }
    --idle_;
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    fn();
    fn = nullptr;
    lock.lock();
    ++idle_;
  }
}

}  // namespace ragkv::server::internal
