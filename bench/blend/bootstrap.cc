#include "bench/blend/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace ragkv::blend {

RatioInterval BootstrapRatio(const std::vector<double>& num, const std::vector<double>& den,
                             int resamples, uint64_t seed) {
  RatioInterval r;
  const size_t n = std::min(num.size(), den.size());
  if (n == 0) return r;
  const double sd = std::accumulate(den.begin(), den.begin() + n, 0.0);
  r.ratio = sd > 0 ? std::accumulate(num.begin(), num.begin() + n, 0.0) / sd : 0;
  r.lo = r.hi = r.ratio;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> ratios;
  ratios.reserve(static_cast<size_t>(std::max(0, resamples)));
  for (int b = 0; b < resamples; ++b) {
    double a = 0, d = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t k = pick(rng);
      a += num[k];
      d += den[k];
    }
    if (d > 0) ratios.push_back(a / d);
  }
  if (ratios.empty()) return r;
  std::sort(ratios.begin(), ratios.end());
  auto at = [&](double q) {
    const size_t i = static_cast<size_t>(std::floor(q * static_cast<double>(ratios.size() - 1)));
    return ratios[std::min(i, ratios.size() - 1)];
  };
  r.lo = at(0.025);
  r.hi = at(0.975);
  return r;
}

}  // namespace ragkv::blend
