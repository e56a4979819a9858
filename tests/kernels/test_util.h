// test_util.h: helpers shared by the kernel tests (random data, ISA loops).
#ifndef RAGKV_TESTS_KERNELS_TEST_UTIL_H_
#define RAGKV_TESTS_KERNELS_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu.h"

namespace ragkv::kernels::testing {

// Isas: every dispatch level this run may use (scalar, then avx2, avx512),
// up to ActiveIsa(): a pass with RAGKV_ISA=avx2 never runs the AVX-512 path.
inline std::vector<Isa> Isas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(ActiveIsa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

// IsaScope: clamps dispatch for the lifetime of the object, then restores
// the previous cap (so RAGKV_ISA's holds after it).
class IsaScope {
 public:
  explicit IsaScope(Isa isa) : prev_(IsaCap()) { SetIsaOverride(isa); }
  ~IsaScope() { SetIsaOverride(prev_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa prev_;
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
