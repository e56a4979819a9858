// oracle_selectors.h: selectors and adaptive stop rules that a server could
// run (they see only a check layer's CheckState), as ReplayBlend rankers, to
// try them against the oracle's bounds before they go into blend/ (bench
// only; docs/benchmarks.md "Selection upper bound").
//
// Thread safety: pure functions of their arguments.
#ifndef RAGKV_BENCH_BLEND_ORACLE_SELECTORS_H_
#define RAGKV_BENCH_BLEND_ORACLE_SELECTORS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/blend/oracle_blend.h"
#include "model/model.h"

namespace ragkv::blend {

// RowErrors: per candidate of a check layer.
struct RowErrors {
  std::vector<float> dev;       // K and V deviation, each over its mean over the candidates, summed
  std::vector<float> att;       // the query rows' attention mass on the row (sum over rows, heads)
  std::vector<float> err_abs;   // att / (query rows x heads) x (|dK|^2 / mean |K|^2 + |dV|^2 / mean |V|^2)
};

// Errors: the above at `st` (the probe vs the cache before the scatter; the
// query's attention from its fresh Q against the cache's keys of the context).
absl::StatusOr<RowErrors> Errors(const model::Model& m, int64_t query_begin, const CheckState& st);

// RealRanker: "attended-deviation" (dev x att: the Blender's default,
// replayed) or "attended-linear" (att x sqrt(dev)); nullptr for other names.
Ranker RealRanker(const std::string& name, const model::Model& m, int64_t query_begin);

// StopRule: "mass@M" (the Blender's: the fewest rows in score order whose
// dev x att covers M of the total), "abs@T" (rows whose err_abs >= T),
// "res@E" (the fewest rows in score order leaving at most E of err_abs),
// "pow@T:A" (rows whose err_abs >= T x (total err_abs)^A: between abs, A =
// 0, and a share of the request's total, A = 1);
// the ratio is the count over `selectable`, clamped to [r_min, r_max].
// nullptr for an unknown name.
RatioChooser StopRule(const std::string& name, const model::Model& m, int64_t query_begin,
                      int64_t selectable, double r_min, double r_max);

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_ORACLE_SELECTORS_H_
