// test_util.h: helpers shared by the kernel tests (random data, ISA loops).
#ifndef RAGKV_TESTS_KERNELS_TEST_UTIL_H_
#define RAGKV_TESTS_KERNELS_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu.h"

namespace ragkv::kernels::testing {

// Isas: every dispatch level this CPU can run (scalar, then avx2, avx512).
inline std::vector<Isa> Isas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(DetectedIsa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

// IsaScope: clamps dispatch for the lifetime of the object.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) { SetIsaOverride(isa); }
  ~IsaScope() { SetIsaOverride(Isa::kAvx512); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

inline std::vector<float> RandomVec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace ragkv::kernels::testing

#endif  // RAGKV_TESTS_KERNELS_TEST_UTIL_H_
