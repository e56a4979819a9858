// RecomputeBudget against a naive re-implementation (every stored error
// tried as the threshold, counted by loops), and its behaviour on a stream
// of requests whose errors differ in size.
#include "blend/recompute_budget.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ragkv::blend {
namespace {

struct Req {
  std::vector<float> err;
  int64_t selectable = 0;
};

// Req: n errors, log-normal around `scale`, a few zeros.
Req RandomReq(std::mt19937* rng, int64_t n, double scale) {
  std::lognormal_distribution<double> d(std::log(scale), 1.5);
  Req r;
  r.selectable = n;
  for (int64_t i = 0; i < n; ++i) r.err.push_back(i % 17 == 0 ? 0.0f : static_cast<float>(d(*rng)));
  return r;
}

// Naive: the same rule by loops: normalize, keep the window, try every
// stored value from the lowest up, carry what was left unspent, cut to
// the ceiling.
class Naive {
 public:
  Naive(double budget, int window) : b_(budget), w_(window) {}
  int64_t Count(const Req& q, double lo, double hi) {
    double total = 0;
    for (float e : q.err) total += std::max(0.0f, e);
    std::vector<double> s;
    for (float e : q.err) {
      if (e > 0) s.push_back(static_cast<float>(e * (1.0 / std::sqrt(total))));
    }
    win_.push_back({s, static_cast<double>(q.selectable), lo, hi});
    if (static_cast<int>(win_.size()) > w_) win_.pop_front();
    const double target =
        std::clamp(b_ + (b_ * n_ - spent_) / static_cast<double>(win_.size()), 0.0, 1.0);
    std::vector<double> cand = {std::numeric_limits<double>::infinity()};
    for (const W& x : win_) cand.insert(cand.end(), x.s.begin(), x.s.end());
    std::sort(cand.begin(), cand.end());
    double t = std::numeric_limits<double>::infinity();
    for (double c : cand) {
      if (Mean(c) <= target) {
        t = c;
        break;
      }
    }
    int64_t k = 0;
    for (double v : win_.back().s) k += v >= t;
    const double allowed = b_ * (n_ + 1) - spent_;  // the ceiling, in ratio
    while (k > 0 && static_cast<double>(k) > allowed * q.selectable + 1e-9) --k;
    spent_ += std::clamp(static_cast<double>(k) / q.selectable, lo, hi);
    ++n_;
    return k;
  }

 private:
  struct W {
    std::vector<double> s;
    double sel, lo, hi;
  };
  double Mean(double t) const {
    double m = 0;
    for (const W& x : win_) {
      int64_t k = 0;
      for (double v : x.s) k += v >= t;
      m += std::clamp(static_cast<double>(k) / x.sel, x.lo, x.hi);
    }
    return m / static_cast<double>(win_.size());
  }
  double b_;
  int w_;
  std::deque<W> win_;
  double spent_ = 0;
  int64_t n_ = 0;
};

TEST(RecomputeBudget, RefusesABudgetOutsideZeroOneAndAnEmptyWindow) {
  for (double b : {0.0, -0.1, 1.5, std::nan("")}) {
    EXPECT_EQ(RecomputeBudget::Create({b, 8}).status().code(), absl::StatusCode::kInvalidArgument)
        << b;
  }
  EXPECT_EQ(RecomputeBudget::Create({0.1, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RecomputeBudget::Create({1.0, 1}).ok());
}

TEST(RecomputeBudget, TheFirstRequestGetsTheBudget) {
  auto b = RecomputeBudget::Create({0.1, 8});
  ASSERT_TRUE(b.ok());
  std::vector<float> err(200);
  for (size_t i = 0; i < err.size(); ++i) err[i] = static_cast<float>(1 + i);  // distinct
  EXPECT_EQ((*b)->Count(err.data(), 200, 200, 0.02, 0.3), 20);
  EXPECT_NEAR((*b)->MeanSpent(), 0.1, 1e-12);
  EXPECT_GT((*b)->Threshold(), 0);
}

TEST(RecomputeBudget, MatchesTheNaiveRule) {
  std::mt19937 rng(7);
  for (int window : {1, 5, 16}) {
    auto b = RecomputeBudget::Create({0.12, window});
    ASSERT_TRUE(b.ok());
    Naive naive(0.12, window);
    for (int i = 0; i < 120; ++i) {
      const int64_t n = 40 + static_cast<int64_t>(rng() % 200);
      const Req q = RandomReq(&rng, n, i % 3 == 0 ? 1e-3 : 1e-5);
      const double lo = 0.02, hi = i % 4 == 0 ? 0.15 : 0.3;
      // Compared as the blend uses them: clamped ratios (past the cap the
      // library stops counting).
      const auto ratio = [&](int64_t k) { return std::clamp(double(k) / n, lo, hi); };
      const double want = ratio(naive.Count(q, lo, hi));
      ASSERT_EQ(ratio((*b)->Count(q.err.data(), n, q.selectable, lo, hi)), want)
          << "window " << window << " request " << i;
    }
  }
}

TEST(RecomputeBudget, MatchesTheNaiveRuleWithRepeatedErrors) {
  // Errors on a coarse grid: equal values within and across requests, so
  // evicting a request takes out copies that other requests also hold.
  std::mt19937 rng(9);
  for (int window : {1, 2, 3, 5}) {
    auto b = RecomputeBudget::Create({0.1, window});
    ASSERT_TRUE(b.ok());
    Naive naive(0.1, window);
    for (int i = 0; i < 80; ++i) {
      Req q;
      q.selectable = 30 + static_cast<int64_t>(rng() % 40);
      for (int64_t j = 0; j < q.selectable; ++j) q.err.push_back(static_cast<float>(rng() % 4));
      const double lo = 0.0, hi = 0.3;
      const auto ratio = [&](int64_t k) { return std::clamp(double(k) / q.selectable, lo, hi); };
      const double want = ratio(naive.Count(q, lo, hi));
      ASSERT_EQ(ratio((*b)->Count(q.err.data(), q.selectable, q.selectable, lo, hi)), want)
          << "window " << window << " request " << i;
    }
  }
}

TEST(RecomputeBudget, SpendsTheBudgetOnAverageAndMoreWhereTheErrorIsLarger) {
  // Two kinds of request alternate: one whose errors stand out of the
  // request's total (a few rows carry it), one whose errors are flat.
  auto b = RecomputeBudget::Create({0.1, 64});
  ASSERT_TRUE(b.ok());
  std::mt19937 rng(11);
  double peaked = 0, flat = 0;
  const int n = 600;
  for (int i = 0; i < n; ++i) {
    std::vector<float> err(300, 1.0f);
    if (i % 2 == 0) {
      for (int j = 0; j < 60; ++j) err[rng() % 300] = 50.0f + static_cast<float>(rng() % 100);
    } else {
      for (float& e : err) e = 1.0f + static_cast<float>(rng() % 100) / 100.0f;
    }
    const int64_t k = (*b)->Count(err.data(), 300, 300, 0.02, 0.3);
    const double r = std::clamp(static_cast<double>(k) / 300, 0.02, 0.3);
    (i % 2 == 0 ? peaked : flat) += r / (n / 2);
  }
  EXPECT_NEAR((*b)->MeanSpent(), 0.1, 0.002);
  EXPECT_EQ((*b)->Requests(), n);
  EXPECT_GT(peaked, 2 * flat);  // the rows go where the error stands out
}

TEST(RecomputeBudget, TheRunningMeanNeverExceedsTheBudget) {
  // Bursts of requests whose errors all stand out (each alone would take
  // the cap) between flat ones: at every prefix the mean spent is within
  // the budget, and the peaked requests still get more than the flat ones.
  for (int window : {1, 8, 64}) {
    auto b = RecomputeBudget::Create({0.1, window});
    ASSERT_TRUE(b.ok());
    std::mt19937 rng(5 + window);
    double sum = 0, peaked = 0, flat = 0;
    for (int i = 0; i < 300; ++i) {
      const bool burst = (i / 10) % 3 == 0;
      const int64_t n = 100 + static_cast<int64_t>(rng() % 150);
      std::vector<float> err(n, 1.0f);
      for (auto& e : err) e = burst ? static_cast<float>(1 + rng() % 1000) : 1.0f;
      const int64_t k = (*b)->Count(err.data(), n, n, 0.02, 0.3);
      const double r = std::clamp(static_cast<double>(k) / n, 0.02, 0.3);
      sum += r;
      (burst ? peaked : flat) += r;
      ASSERT_LE(sum / (i + 1), 0.1 + 1e-12) << "window " << window << " request " << i;
      ASSERT_NEAR((*b)->MeanSpent(), sum / (i + 1), 1e-12);
    }
    EXPECT_GT(sum / 300, 0.09) << window;  // and it is spent, not hoarded
    EXPECT_GT(peaked / 100, flat / 200) << window;
  }
}

TEST(RecomputeBudget, AFloorAboveTheBudgetIsLoweredToIt) {
  // r_min 0.5 against a budget of 0.1: Count lowers the floor to the
  // budget (Floor), so requests that the floor alone would push to 0.5
  // still keep the running mean within the budget.
  auto b = RecomputeBudget::Create({0.1, 16});
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ((*b)->Floor(0.5), 0.1);
  EXPECT_DOUBLE_EQ((*b)->Floor(0.02), 0.02);
  std::mt19937 rng(11);
  double sum = 0;
  for (int i = 0; i < 100; ++i) {
    const Req q = RandomReq(&rng, 120, 1e-4);
    const int64_t k = (*b)->Count(q.err.data(), 120, 120, 0.5, 0.6);
    sum += std::clamp(static_cast<double>(k) / 120, (*b)->Floor(0.5), 0.6);
    ASSERT_LE(sum / (i + 1), 0.1 + 1e-12) << "request " << i;
    ASSERT_NEAR((*b)->MeanSpent(), sum / (i + 1), 1e-12);
  }
}

TEST(RecomputeBudget, ConcurrentRequestsAreAllCounted) {
  auto b = RecomputeBudget::Create({0.1, 32});
  ASSERT_TRUE(b.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 50; ++i) {
        const Req q = RandomReq(&rng, 100, 1e-4);
        const int64_t k = (*b)->Count(q.err.data(), 100, 100, 0.02, 0.3);
        EXPECT_GE(k, 0);
        EXPECT_LE(k, 100);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ((*b)->Requests(), 200);
  EXPECT_NEAR((*b)->MeanSpent(), 0.1, 0.02);
}

}  // namespace
}  // namespace ragkv::blend
