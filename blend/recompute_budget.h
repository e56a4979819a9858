// recompute_budget.h: RecomputeBudget, the adaptive ratio as a mean
// recompute budget spent across requests (docs/blend.md "Adaptive ratio":
// the budget rule).
//
// A fixed threshold on the estimated error (BlendOptions::
// adaptive_threshold) spends a different mean ratio on every workload: the
// same t gave mean r 0.065 on one prompt shape and 0.12 on another. A
// RecomputeBudget holds the recent requests' estimated errors and sets one
// threshold for them all, the lowest whose mean ratio stays within the
// budget: rows are recomputed where the first-order error is largest among
// recent requests, and the mean spend is the operator's budget at most, on
// any workload. The first request gets at most the budget; the threshold
// adapts as the window fills. What the requests so far left unspent (the
// credit) is carried into the next threshold, spread over the window.
//
// The budget is a ceiling: a request may spend at most the budget plus the
// credit, so the mean ratio of the requests so far never exceeds the budget.
// A floor above the budget would break that, so Count lowers each request's
// r_min to the budget (Floor), and a caller that clamps the ratio clamps
// with Floor(r_min) too (the Blender clamps with adaptive_min, which it
// refuses above the budget, so the two agree).
//
// Thread safety: Count is thread-safe (one mutex; parallel slots share one
// budget).
#ifndef RAGKV_BLEND_RECOMPUTE_BUDGET_H_
#define RAGKV_BLEND_RECOMPUTE_BUDGET_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::blend {

// ErrorUnit: sqrt of the sum of err[0..n)'s positive finite values (0 for
// none), the unit the threshold rule and the budget rule compare each e_i
// in. The budget rule ignores non-finite errors.
double ErrorUnit(const float* err, int64_t n);

class RecomputeBudget {
 public:
  struct Options {
    double budget = 0.10;  // the mean share of selectable rows recomputed, in (0, 1]
    int window = 64;       // recent requests the threshold is set over, >= 1
  };
  // Create: InvalidArgument for a budget outside (0, 1] or a window < 1.
  static absl::StatusOr<std::unique_ptr<RecomputeBudget>> Create(Options options);

  // Count: how many of this request's `n` candidate rows to recompute.
  // `err`: their estimated errors (the threshold rule's e_i, >= 0);
  // `selectable`: the rows the ratio is a share of; the request's ratio is
  // clamped to [r_min, r_max] (its adaptive_min and ratio cap). Records the
  // request in the window, then returns the count of its rows whose e_i /
  // sqrt(sum of e) clears the window's threshold (counted up to just past
  // r_max's share: the blend clamps it), cut to what the ceiling allows.
  int64_t Count(const float* err, int64_t n, int64_t selectable, double r_min, double r_max);

  // Floor: the floor Count applies for a requested r_min: min(r_min, budget).
  double Floor(double r_min) const { return std::min(r_min, options_.budget); }

  // Threshold: the last threshold set (in units of e / sqrt(sum e)); 0
  // before the first request. Requests: how many Count has seen.
  // MeanSpent: their mean ratio (clamped as the blend clamps it).
  double Threshold() const;
  int64_t Requests() const;
  double MeanSpent() const;
  const Options& options() const { return options_; }

 private:
  struct Seen {
    std::vector<float> s;  // normalized errors, descending, cut at r_max's count
    double selectable = 1, r_min = 0, r_max = 1;
  };
  explicit RecomputeBudget(Options o) : options_(o) {}
  static Seen Normalize(const float* err, int64_t n, int64_t selectable, double r_min,
                        double r_max);
  // Push: adds q to the window (and its values to sorted_), evicting the
  // oldest request past the window.
  void Push(Seen q);
  // MeanRatio: the window's mean clamped ratio at threshold t.
  double MeanRatio(double t) const;
  // Solve: the lowest stored value whose window mean fits `target`.
  double Solve(double target) const;

  const Options options_;
  mutable std::mutex mu_;
  std::deque<Seen> window_;
  std::vector<float> sorted_;  // every value in window_, ascending
  double threshold_ = 0;
  int64_t requests_ = 0;
  double spent_ = 0;  // the ratios given so far, summed
};

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_RECOMPUTE_BUDGET_H_
