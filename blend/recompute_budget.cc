#include "blend/recompute_budget.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "absl/strings/str_format.h"

namespace ragkv::blend {
namespace {

// Above: how many of the descending `s` are >= t.
int64_t Above(const std::vector<float>& s, double t) {
  return std::partition_point(s.begin(), s.end(), [t](float x) { return x >= t; }) - s.begin();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecomputeBudget>> RecomputeBudget::Create(Options o) {
  if (!(o.budget > 0 && o.budget <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("recompute budget %g outside (0, 1]", o.budget));
  }
  if (o.window < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("recompute budget window %d < 1", o.window));
  }
  return std::unique_ptr<RecomputeBudget>(new RecomputeBudget(o));
}

double RecomputeBudget::MeanRatio(double t) const {
  double sum = 0;
  for (const Seen& q : window_) {
    sum += std::clamp(static_cast<double>(Above(q.s, t)) / q.selectable, q.r_min, q.r_max);
  }
  return sum / static_cast<double>(window_.size());
}

double RecomputeBudget::Solve(double target) const {
  // The candidate thresholds are the stored values; MeanRatio is
  // non-increasing in t. Find the lowest stored value whose mean fits.
  std::vector<float> all;
  for (const Seen& q : window_) all.insert(all.end(), q.s.begin(), q.s.end());
  std::sort(all.begin(), all.end());
  const double inf = std::numeric_limits<double>::infinity();
  if (all.empty() || MeanRatio(inf) > target) return inf;
  // all[i] ascending: a higher index spends less. Smallest i that fits.
  size_t lo = 0, hi = all.size();  // invariant: fits at `hi` (hi = size: t = inf)
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (MeanRatio(all[mid]) <= target) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi == all.size() ? inf : all[hi];
}

int64_t RecomputeBudget::Count(const float* err, int64_t n, int64_t selectable, double r_min,
                               double r_max) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += std::max(0.0f, err[i]);
  const double norm = total > 0 ? 1.0 / std::sqrt(total) : 0.0;
  Seen q;
  q.selectable = static_cast<double>(std::max<int64_t>(1, selectable));
  q.r_min = r_min;
  q.r_max = std::max(r_min, r_max);
  q.s.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (err[i] > 0) q.s.push_back(static_cast<float>(err[i] * norm));
  }
  std::sort(q.s.begin(), q.s.end(), std::greater<float>());
  const auto keep = static_cast<size_t>(std::ceil(q.r_max * q.selectable)) + 1;
  if (q.s.size() > keep) q.s.resize(keep);
  std::lock_guard<std::mutex> lock(mu_);
  window_.push_back(std::move(q));
  if (window_.size() > static_cast<size_t>(options_.window)) window_.pop_front();
  const double debt = options_.budget * static_cast<double>(requests_) - spent_;
  const double w = static_cast<double>(window_.size());
  threshold_ = Solve(std::clamp(options_.budget + debt / w, 0.0, 1.0));
  const Seen& cur = window_.back();
  const int64_t k = Above(cur.s, threshold_);
  spent_ += std::clamp(static_cast<double>(k) / cur.selectable, cur.r_min, cur.r_max);
  ++requests_;
  return k;
}

double RecomputeBudget::Threshold() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threshold_;
}

double RecomputeBudget::MeanSpent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_ > 0 ? spent_ / static_cast<double>(requests_) : 0;
}

int64_t RecomputeBudget::Requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

}  // namespace ragkv::blend
