// job_progress.h: the precompute Job's throughput and ETA
// (Job.tokens_per_second, Job.eta_seconds) from its counters, the rule of
// docs/protocol.md "Job progress", kept apart from JobManager so that it
// can be tested on hand-made counters.
//
// Private to services/. Pure functions: thread-safe.
#ifndef RAGKV_SERVICES_INTERNAL_JOB_PROGRESS_H_
#define RAGKV_SERVICES_INTERNAL_JOB_PROGRESS_H_

#include "ragkv/v1/precompute.pb.h"

namespace ragkv::services::internal {

// JobTimes: the clocks the rule reads besides the Job's counters.
struct JobTimes {
  double elapsed_seconds = 0;  // since the job started
  // Since the neighbour pass (stage 4) began; < 0: it has not begun.
  double pass_seconds = -1;
};

// SetJobRates: sets j->tokens_per_second (the tokens the model ran over,
// plain chunks plus the neighbour pass's contexts and chunks, per elapsed
// second) and j->eta_seconds (the plain chunks left at the plain stage's
// time per chunk, plus the pass's chunks left at the pass's time per
// chunk). Leaves both unchanged when t.elapsed_seconds <= 0.
void SetJobRates(const JobTimes& t, v1::Job* j);

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_JOB_PROGRESS_H_
