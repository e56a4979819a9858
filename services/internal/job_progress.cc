#include "services/internal/job_progress.h"

#include <algorithm>
#include <cstdint>

namespace ragkv::services::internal {

namespace {

// Left: total - processed, floored at 0.
uint64_t Left(uint64_t total, uint64_t processed) {
  return total > processed ? total - processed : 0;
}

// PlainProcessed: the plain chunks done, skipped or failed.
uint64_t PlainProcessed(const v1::Job& j) {
  return j.chunks_done() + j.chunks_skipped() + j.chunks_failed();
}

// PassProcessed: the neighbour records done, skipped or failed.
uint64_t PassProcessed(const v1::NeighbourPass& p) {
  return p.chunks_done() + p.chunks_skipped() + p.chunks_failed();
}

// PassEta: seconds left in the neighbour pass (0 before it begins). Until
// it has listed its chunks its size is taken as chunks_total (the plain
// chunks of this shard, which it covers); until it has processed one,
// its time per chunk is the plain stage's.
double PassEta(const JobTimes& t, const v1::Job& j, double plain_per_chunk) {
  if (t.pass_seconds < 0) return 0;
  const v1::NeighbourPass& p = j.neighbour_pass();
  const uint64_t done = PassProcessed(p);
  const uint64_t left = j.has_neighbour_pass() ? Left(p.chunks_total(), done) : j.chunks_total();
  const double per_chunk = done > 0 ? t.pass_seconds / done : plain_per_chunk;
  return left * per_chunk;
}

}  // namespace

void SetJobRates(const JobTimes& t, v1::Job* j) {
  if (t.elapsed_seconds <= 0) return;
  const v1::NeighbourPass& p = j->neighbour_pass();
  const uint64_t tokens = j->tokens_done() + p.context_tokens() + p.chunk_tokens();
  j->set_tokens_per_second(tokens / t.elapsed_seconds);
  // The plain stages end when the pass begins.
  const double plain_seconds =
      t.pass_seconds < 0 ? t.elapsed_seconds : std::max(0.0, t.elapsed_seconds - t.pass_seconds);
  const uint64_t processed = PlainProcessed(*j);
  const double plain_per_chunk = processed > 0 ? plain_seconds / processed : 0;
  const double plain_eta = Left(j->chunks_total(), processed) * plain_per_chunk;
  j->set_eta_seconds(plain_eta + PassEta(t, *j, plain_per_chunk));
}

}  // namespace ragkv::services::internal
