// kill -9 of the real `ragkv serve` during a PutChunk storm (issue #10):
// client threads put distinct chunks (and some threads the same chunks at the
// same time), the test records every Put the server acknowledged, SIGKILLs
// the server mid-storm, restarts it on the same data dir and checks that
//  * every acknowledged chunk is present and bit-exact (GetChunk), and
//  * no GetChunk returns corrupt data: a chunk whose Put was not acknowledged
//    is either NOT_FOUND or complete and bit-exact; nothing else.
// Two kill/restart rounds on one data dir; run once with the serve default
// (--sync-writes true: WAL fsynced before the ack) and once without fsync
// (the WAL write reaches the OS before the ack, which survives a process
// kill but not a power loss). docs/reliability.md "Fault injection".
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/probe_util.h"
#include "tests/integration/serve_process.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/integration/test_chunks.h"

namespace ragkv::testing {
namespace {

// StormRound: the puts of one round, what was attempted and acknowledged.
struct StormResult {
  std::vector<int> attempted;  // chunk ids whose Put was started
  std::vector<int> acked;      // chunk ids with an OK PutChunk response
  int errors = 0;              // Puts that failed (the kill)
};

// RunStorm: kThreads client threads put chunks [first, first + per_round)
// until the server dies. Threads 0..kDistinct-1 put disjoint subsets; the
// others all put one shared sequence, so identical Puts race each other (the
// second may be answered already_present while the first is still
// writing). The server is SIGKILLed by the first shared-sequence thread
// whose ack brings the count to `kill_after_acks`, right after that ack: the
// moment an early already_present answer would be least durable.
StormResult RunStorm(ServeProcess* server, int first, int count, int kill_after_acks) {
  constexpr int kThreads = 6;
  constexpr int kDistinct = 4;
  StormResult r;
  std::mutex mu;
  std::atomic<int> acks{0};
  std::atomic<bool> dead{false};
  std::atomic<bool> killed{false};
  int kill_signal = -1;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = server->NewClient(absl::Seconds(30));
      if (client == nullptr) return;
      for (int i = 0; i < count && !dead.load(); ++i) {
        int id;
        if (t < kDistinct) {
          if (i % 2 == 1) continue;  // even slots: distinct; odd slots: shared
          if ((i / 2) % kDistinct != t) continue;
          id = first + i;
        } else {
          if (i % 2 == 0) continue;
          id = first + i;
        }
        StoredChunk c = MakeTestChunk(id);
        {
          std::lock_guard<std::mutex> lock(mu);
          r.attempted.push_back(id);
        }
        auto resp = client->PutChunk(c);
        std::lock_guard<std::mutex> lock(mu);
        if (resp.ok()) {
          r.acked.push_back(id);
          const int n = acks.fetch_add(1) + 1;
          if (t >= kDistinct && n >= kill_after_acks && !killed.exchange(true)) {
            kill_signal = server->Kill9();
            dead.store(true);
          }
        } else {
          ++r.errors;
          if (!absl::IsUnavailable(resp.status()) && !absl::IsCancelled(resp.status()) &&
              !absl::IsDeadlineExceeded(resp.status()) && !absl::IsInternal(resp.status())) {
            ADD_FAILURE() << "unexpected Put error before the kill: " << resp.status();
          }
          dead.store(true);  // the server is gone: stop this round
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  if (!killed.load()) kill_signal = server->Kill9();  // the storm ended first
  EXPECT_EQ(kill_signal, SIGKILL);
  EXPECT_TRUE(killed.load()) << "the storm ended before the kill";
  return r;
}

// CheckAll: every acked id present and exact; every attempted id absent or exact.
void CheckAll(ServeProcess* server, const std::vector<int>& acked, const std::vector<int>& attempted,
              int* present_unacked) {
  auto client = server->NewClient(absl::Seconds(60));
  ASSERT_NE(client, nullptr);
  std::map<int, bool> is_acked;
  for (int id : attempted) is_acked.emplace(id, false);
  for (int id : acked) is_acked[id] = true;
  for (const auto& [id, ack] : is_acked) {
    const StoredChunk want = MakeTestChunk(id);
    auto got = client->GetChunk(want.header.key());
    if (ack) {
      ASSERT_TRUE(got.ok()) << "acknowledged chunk " << id << " lost: " << got.status();
      EXPECT_TRUE(SameChunk(want, *got)) << "acknowledged chunk " << id;
    } else if (got.ok()) {
      EXPECT_TRUE(SameChunk(want, *got)) << "unacknowledged chunk " << id << " served corrupt";
      ++*present_unacked;
    } else {
      EXPECT_TRUE(absl::IsNotFound(got.status()))
          << "unacknowledged chunk " << id << ": " << got.status();
    }
  }
}

class PutStormKillTest : public ::testing::TestWithParam<bool> {};

TEST_P(PutStormKillTest, EveryAcknowledgedChunkSurvivesKillNine) {
  const bool sync_writes = GetParam();
  TempDir dir;
  const std::string log = dir.path() + "/serve.log";
  const std::vector<std::string> args = {"--data-dir", dir.path() + "/data", "--services",
                                         "kvstore", "--workers", "4", "--sync-writes",
                                         sync_writes ? "true" : "false"};
  std::vector<int> acked, attempted;
  constexpr int kRounds = 4;
  constexpr int kPerRound = 600;
  int present_unacked = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto server = ServeProcess::Start(args, log);
    ASSERT_TRUE(server.ok()) << server.status();
    // Earlier rounds' chunks are all still there after this restart.
    CheckAll(server->get(), acked, attempted, &present_unacked);
    if (::testing::Test::HasFailure()) {
      FAIL() << "round " << round << ", the server's log:\n" << LogEvidence(log);
    }
    StormResult r = RunStorm(server->get(), round * kPerRound, kPerRound, /*kill_after_acks=*/120);
    ASSERT_GE(r.acked.size(), 120u) << "round " << round;
    acked.insert(acked.end(), r.acked.begin(), r.acked.end());
    attempted.insert(attempted.end(), r.attempted.begin(), r.attempted.end());
    GTEST_LOG_(INFO) << "round " << round << ": " << r.attempted.size() << " Puts started, "
                     << r.acked.size() << " acknowledged, " << r.errors << " failed by the kill";
  }
  auto server = ServeProcess::Start(args, log);
  ASSERT_TRUE(server.ok()) << server.status();
  present_unacked = 0;
  CheckAll(server->get(), acked, attempted, &present_unacked);
  GTEST_LOG_(INFO) << acked.size() << " acknowledged chunks checked; " << present_unacked
                   << " of " << attempted.size() - acked.size()
                   << " unacknowledged ones present (complete)";
  EXPECT_EQ((*server)->Terminate(), 0);
  if (::testing::Test::HasFailure()) {
    // Seen under ASan until session 11 (a member call on a finished
    // GetChunk stream, grpc_util.h StreamWriter::Close): the log is the
    // evidence.
    ADD_FAILURE() << "the final server's log:\n" << LogEvidence(log, 6000);
  }
}

INSTANTIATE_TEST_SUITE_P(SyncWrites, PutStormKillTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("Fsync") : std::string("NoFsync");
                         });

}  // namespace
}  // namespace ragkv::testing
