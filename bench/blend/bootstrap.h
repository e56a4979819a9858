// bootstrap.h: a percentile bootstrap interval for a ratio of sums over
// paired samples (`ragkv bench quality`'s codec rows: a codec's KL over the
// raw records' KL, one pair per prompt).
#ifndef RAGKV_BENCH_BLEND_BOOTSTRAP_H_
#define RAGKV_BENCH_BLEND_BOOTSTRAP_H_

#include <cstdint>
#include <vector>

namespace ragkv::blend {

struct RatioInterval {
  double ratio = 0;  // sum(num) / sum(den) over all pairs
  double lo = 0, hi = 0;  // 2.5th and 97.5th percentiles over the resamples
};

// BootstrapRatio: `num` and `den` paired (same size > 0, sum(den) > 0);
// `resamples` resamples of the pairs drawn with replacement (std::mt19937_64
// seeded with `seed`: the same inputs give the same interval); a resample
// whose den sums to 0 is skipped.
RatioInterval BootstrapRatio(const std::vector<double>& num, const std::vector<double>& den,
                             int resamples = 2000, uint64_t seed = 1);

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_BOOTSTRAP_H_
