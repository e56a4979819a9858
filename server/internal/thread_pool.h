// Copyright ragkv authors.
//
// thread_pool.h: the HTTP server's connection workers (cpp-httplib's
// TaskQueue). cpp-httplib serves a connection on one worker from accept to
// close, kept-alive idle time included, so a fixed pool is held by idle
// pooled clients and a new connection waits for the keep-alive timeout of
// an old one (not a 429, not a 503: nothing answers it; /health too).
// DynamicThreadPool keeps `min_threads` and starts another worker whenever
// a connection arrives and none is free, up to `max_threads` (as
// llama-server does since its "dynamic threads"); the extra ones end after
// `idle` without work. Past `max_threads` connections queue, as they do
// when the system refuses a thread (said once on stderr). Linux/POSIX.
//
// Thread safety: enqueue and the accessors may be called from any thread;
// shutdown once, after the last enqueue.
#ifndef RAGKV_SERVER_INTERNAL_THREAD_POOL_H_
#define RAGKV_SERVER_INTERNAL_THREAD_POOL_H_

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace ragkv::server::internal {

class DynamicThreadPool final : public httplib::TaskQueue {
 public:
  // min_threads >= 1 start now; max_threads >= min_threads.
  DynamicThreadPool(int min_threads, int max_threads, std::chrono::milliseconds idle);
  ~DynamicThreadPool() override;

  void enqueue(std::function<void()> fn) override;
  // shutdown: runs the queued tasks, then joins every worker. A task
  // enqueued after it runs on the caller's thread.
  void shutdown() override;

  int threads() const;  // workers alive now
  int peak() const;     // most workers alive at once

 private:
  void Start(bool extra);  // mu_ held
  void Work(bool extra);
  void Reap();  // joins the extra workers that ended; mu_ held

  const int max_;
  const std::chrono::milliseconds idle_time_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<std::thread> threads_;
  std::vector<std::thread::id> ended_;
  int live_ = 0, idle_ = 0, peak_ = 0;
  bool shutdown_ = false;
  bool start_failed_ = false;  // said once on stderr
};

}  // namespace ragkv::server::internal

#endif  // RAGKV_SERVER_INTERNAL_THREAD_POOL_H_
