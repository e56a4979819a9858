// The precompute Job's rate and ETA rule (services/internal/job_progress.h,
// docs/protocol.md "Job progress") on hand-made counters: the plain stages
// as before, and the neighbour pass counted while it runs (it used to
// leave the ETA at 0 and the rate decaying once the plain chunks were done).
#include "services/internal/job_progress.h"

#include <gtest/gtest.h>

namespace ragkv::services::internal {
namespace {

constexpr double kTol = 1e-9;

// PlainJob: 100 plain chunks, `processed` of them done (10 tokens each).
v1::Job PlainJob(uint64_t processed) {
  v1::Job j;
  j.set_chunks_total(100);
  j.set_chunks_done(processed);
  j.set_tokens_done(10 * processed);
  return j;
}

TEST(JobProgressTest, PlainStagesAsBefore) {
  v1::Job j = PlainJob(40);
  j.set_chunks_skipped(10);  // 50 processed in 5 s: 0.1 s a chunk
  SetJobRates({/*elapsed_seconds=*/5, /*pass_seconds=*/-1}, &j);
  EXPECT_NEAR(j.tokens_per_second(), 400.0 / 5, kTol);
  EXPECT_NEAR(j.eta_seconds(), 50 * 0.1, kTol);
  v1::Job none = PlainJob(0);  // nothing processed yet: no estimate
  SetJobRates({5, -1}, &none);
  EXPECT_EQ(none.eta_seconds(), 0);
  v1::Job at_start = PlainJob(3);  // no time elapsed: left unchanged
  at_start.set_eta_seconds(7);
  SetJobRates({0, -1}, &at_start);
  EXPECT_EQ(at_start.eta_seconds(), 7);
}

TEST(JobProgressTest, NeighbourPassCountsInEtaAndRate) {
  // Plain stage: 100 chunks in 10 s (0.1 s a chunk), then the pass for 6 s:
  // 30 of 120 records processed (0.2 s a record), 90 left.
  v1::Job j = PlainJob(100);
  v1::NeighbourPass* p = j.mutable_neighbour_pass();
  p->set_chunks_total(120);
  p->set_chunks_done(20);
  p->set_chunks_skipped(8);
  p->set_chunks_failed(2);
  p->set_context_tokens(400);
  p->set_chunk_tokens(200);
  SetJobRates({/*elapsed_seconds=*/16, /*pass_seconds=*/6}, &j);
  EXPECT_NEAR(j.eta_seconds(), 90 * 0.2, kTol);  // the old rule: 0
  EXPECT_NEAR(j.tokens_per_second(), (1000.0 + 400 + 200) / 16, kTol);  // old: 1000 / 16
  // The pass done: nothing left.
  p->set_chunks_done(110);
  SetJobRates({20, 10}, &j);
  EXPECT_EQ(j.eta_seconds(), 0);
}

TEST(JobProgressTest, PassBeforeItsFirstRecordUsesThePlainStage) {
  // Plain stage: 100 chunks in 10 s. The pass has begun, 1 s ago.
  v1::Job j = PlainJob(100);
  // Still listing the catalogue (no Job.neighbour_pass yet): its size is
  // taken as chunks_total, its time per record as the plain stage's.
  SetJobRates({11, 1}, &j);
  EXPECT_NEAR(j.eta_seconds(), 100 * 0.1, kTol);
  // Listed, 150 records, none processed yet.
  j.mutable_neighbour_pass()->set_chunks_total(150);
  SetJobRates({11, 1}, &j);
  EXPECT_NEAR(j.eta_seconds(), 150 * 0.1, kTol);
  EXPECT_GT(j.eta_seconds(), 0);
}

}  // namespace
}  // namespace ragkv::services::internal
