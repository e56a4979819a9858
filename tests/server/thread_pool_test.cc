// thread_pool_test.cc: the HTTP server's connection workers (server/
// internal/thread_pool.h): a task that blocks (a kept-alive connection)
// does not hold back the next one while fewer than max_threads run; past
// that tasks queue; extra workers end when idle; shutdown runs what is
// queued. The waits are hang bounds, not speed figures.
#include "server/internal/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ragkv::server::internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Gate: tasks that block until Open, counting how many run at once.
class Gate {
 public:
  std::function<void()> Task() {
    return [this] {
      std::unique_lock<std::mutex> lock(mu_);
      ++running_;
      ++started_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return open_; });
      --running_;
      ++done_;
      cv_.notify_all();
    };
  }
  // WaitRunning: true once n tasks run at once (false after 30 s).
  bool WaitRunning(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, seconds(30), [&] { return running_ >= n; });
  }
  bool WaitDone(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, seconds(30), [&] { return done_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int running() {
    std::lock_guard<std::mutex> lock(mu_);
    return running_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0, started_ = 0, done_ = 0;
  bool open_ = false;
};

TEST(DynamicThreadPoolTest, BlockedTasksDoNotHoldBackNewOnesUpToTheMaximum) {
  DynamicThreadPool pool(2, 8, milliseconds(50));
  EXPECT_EQ(pool.threads(), 2);
  Gate gate;
  for (int i = 0; i < 6; ++i) pool.enqueue(gate.Task());
  ASSERT_TRUE(gate.WaitRunning(6)) << "only " << gate.running() << " of 6 ran at once";
  EXPECT_EQ(pool.threads(), 6);
  gate.Open();
  ASSERT_TRUE(gate.WaitDone(6));
  pool.shutdown();
}

TEST(DynamicThreadPoolTest, PastTheMaximumTasksQueueAndAllRun) {
  DynamicThreadPool pool(1, 3, milliseconds(50));
  Gate gate;
  for (int i = 0; i < 7; ++i) pool.enqueue(gate.Task());
  ASSERT_TRUE(gate.WaitRunning(3));
  std::this_thread::sleep_for(milliseconds(100));  // no fourth may start
  EXPECT_EQ(gate.running(), 3);
  EXPECT_EQ(pool.peak(), 3);
  gate.Open();
  ASSERT_TRUE(gate.WaitDone(7));
  pool.shutdown();
}

TEST(DynamicThreadPoolTest, ExtraWorkersEndWhenIdleAndStartAgain) {
  DynamicThreadPool pool(2, 16, milliseconds(20));
  for (int round = 0; round < 2; ++round) {
    Gate gate;
    for (int i = 0; i < 10; ++i) pool.enqueue(gate.Task());
    ASSERT_TRUE(gate.WaitRunning(10)) << "round " << round;
    gate.Open();
    ASSERT_TRUE(gate.WaitDone(10));
    for (int i = 0; i < 3000 && pool.threads() > 2; ++i)
      std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(pool.threads(), 2) << "round " << round;
  }
  // Enqueue reaps the ended workers (joins them) as it goes.
  std::atomic<int> ran{0};
  pool.enqueue([&] { ++ran; });
  pool.shutdown();
  EXPECT_EQ(ran.load(), 1);
}

TEST(DynamicThreadPoolTest, ShutdownRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    DynamicThreadPool pool(1, 1, milliseconds(10));
    Gate gate;
    pool.enqueue(gate.Task());
    ASSERT_TRUE(gate.WaitRunning(1));
    for (int i = 0; i < 20; ++i) pool.enqueue([&] { ++ran; });
    gate.Open();
    pool.shutdown();
    EXPECT_EQ(ran.load(), 20);
  }  // the destructor after shutdown: nothing left to do
}

}  // namespace
}  // namespace ragkv::server::internal
