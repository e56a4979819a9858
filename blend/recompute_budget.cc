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

double ErrorUnit(const float* err, int64_t n) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(err[i]) && err[i] > 0) total += err[i];
  }
  return std::sqrt(total);
}

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
  // The candidate thresholds are the stored values (sorted_, ascending);
  // MeanRatio is non-increasing in t. Find the lowest one whose mean fits.
  const double inf = std::numeric_limits<double>::infinity();
  if (sorted_.empty() || MeanRatio(inf) > target) return inf;
  // A higher index spends less. Smallest i that fits.
  size_t lo = 0, hi = sorted_.size();  // invariant: fits at `hi` (hi = size: t = inf)
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (MeanRatio(sorted_[mid]) <= target) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi == sorted_.size() ? inf : sorted_[hi];
}

void RecomputeBudget::Push(Seen q) {
  // sorted_ holds every stored value ascending: merge the new request's
  // (descending) values in and take the evicted request's out, O(stored).
  const auto mid = static_cast<std::ptrdiff_t>(sorted_.size());
  sorted_.insert(sorted_.end(), q.s.rbegin(), q.s.rend());
  std::inplace_merge(sorted_.begin(), sorted_.begin() + mid, sorted_.end());
  window_.push_back(std::move(q));
  if (window_.size() <= static_cast<size_t>(options_.window)) return;
  const std::vector<float>& gone = window_.front().s;  // descending
  auto out = sorted_.begin();
  auto g = gone.rbegin();
  for (auto it = sorted_.begin(); it != sorted_.end(); ++it) {
    if (g != gone.rend() && *it == *g) {
      ++g;  // one stored copy of each evicted value leaves
    } else {
      *out++ = *it;
    }
  }
  sorted_.erase(out, sorted_.end());
  window_.pop_front();
}

RecomputeBudget::Seen RecomputeBudget::Normalize(const float* err, int64_t n, int64_t selectable,
                                                 double r_min, double r_max) {
  const double unit = ErrorUnit(err, n);
  const double norm = unit > 0 ? 1.0 / unit : 0.0;
  Seen q;
  q.selectable = static_cast<double>(std::max<int64_t>(1, selectable));
  q.r_min = r_min;
  q.r_max = std::max(r_min, r_max);
  q.s.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(err[i]) && err[i] > 0) q.s.push_back(static_cast<float>(err[i] * norm));
  }
  std::sort(q.s.begin(), q.s.end(), std::greater<float>());
  const auto keep = static_cast<size_t>(std::ceil(q.r_max * q.selectable)) + 1;
  if (q.s.size() > keep) q.s.resize(keep);
  return q;
}

int64_t RecomputeBudget::Count(const float* err, int64_t n, int64_t selectable, double r_min,
                               double r_max) {
  Seen q = Normalize(err, n, selectable, Floor(r_min), r_max);
  std::lock_guard<std::mutex> lock(mu_);
  Push(std::move(q));
  // credit: what the requests so far spent under the budget (>= 0: the
  // floor is at most the budget and the ceiling below keeps it so).
  const double credit = options_.budget * static_cast<double>(requests_) - spent_;
  const double w = static_cast<double>(window_.size());
  threshold_ = Solve(std::clamp(options_.budget + credit / w, 0.0, 1.0));
  const Seen& cur = window_.back();
  // The ceiling: this request may spend at most the budget plus the credit,
  // so the running mean never exceeds the budget.
  const auto cap =
      static_cast<int64_t>(std::floor((options_.budget + credit) * cur.selectable + 1e-9));
  const int64_t k = std::min(Above(cur.s, threshold_), std::max<int64_t>(0, cap));
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
