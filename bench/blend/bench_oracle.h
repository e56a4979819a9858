// bench_oracle.h: `ragkv bench quality --oracle RANKERS`: how far row
// selection can go on the quality bench's prompts (ragkv runtime), against
// rankings that know full prefill's K/V (docs/benchmarks.md "Selection
// upper bound"). Bench only: none of these rankers can run in a server.
//
// Rankers (each at every --ratios value, the Blender's gradual schedule
// of QualityBenchOptions::blend, replayed by oracle_blend.h's ReplayBlend):
//   blender          the Blender itself (blend options as given)
//   replay           ReplayBlend keeping the Blender's own recomputed rows
//                    (checks that the replay is the Blender)
//   future-dev       sum over the layers after the check of the cached
//                    row's true K/V deviation (each layer mean-normalized)
//   future-attended  the same, each layer's deviation x full prefill's
//                    query attention on the row, over its layer total
//   effect           the KL the row alone removes when exact at every layer
//                    after the check (SwapModel)
//   greedy           rows in the order a greedy search adds them, each the
//                    one that lowers the SwapModel's KL most (slow)
//   attended-deviation, attended-linear
//                    what a server can compute (oracle_selectors.h): the
//                    Blender's default replayed, and att x sqrt(dev)
// Adaptive stop rules mass@M, abs@T, res@E (oracle_selectors.h StopRule)
// run once per prompt over attended-deviation, capped at adaptive_max:
//   oracle ranker=RULE mean_r=X kl=K x_full_reuse=F
// One line per ranker and ratio:
//   oracle ranker=R r=X kl=K x_full_reuse=F top1=T
// and per budget B of `oracle_budgets`, the best per-prompt choice of r on
// the ratio grid (per prompt the r minimizing KL + lambda r, lambda set so
// that the mean r is <= B): what a perfect adaptive stop rule could do with
// that ranker:
//   oracle-budget ranker=R budget=B mean_r=X kl=K x_full_reuse=F
// Adaptive Blender rows (QualityBenchOptions::adaptive, each mass capped at
// adaptive_max) print as ranker=adaptive/m=M with their mean r.
//
// Thread safety: reentrant (all state is local).
#ifndef RAGKV_BENCH_BLEND_BENCH_ORACLE_H_
#define RAGKV_BENCH_BLEND_BENCH_ORACLE_H_

#include <ostream>

#include "absl/status/status.h"
#include "bench/blend/bench_quality.h"

namespace ragkv::blend {

// RunOracleBench: the lines above for o.oracle's rankers over o's prompts.
// Errors: an unknown ranker (InvalidArgument), the model's, the prompts'.
absl::Status RunOracleBench(const QualityBenchOptions& o, std::ostream& out);

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_BENCH_ORACLE_H_
