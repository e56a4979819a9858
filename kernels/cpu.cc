#include "kernels/cpu.h"

#include <omp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>


extern "C" void openblas_set_num_threads(int num_threads);

namespace ragkv::kernels {
namespace {

Isa Detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (!avx2) return Isa::kScalar;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return Isa::kAvx512;
  }
  return Isa::kAvx2;
}

// IsaFromEnv: the cap named by RAGKV_ISA (scalar|avx2|avx512), kAvx512 (no
// cap) when unset. An unknown value is refused loudly: a test pass that
// meant to force a path must not silently run another one.
int IsaFromEnv() {
  const char* e = std::getenv("RAGKV_ISA");
  if (e == nullptr || *e == '\0') return static_cast<int>(Isa::kAvx512);
  if (std::strcmp(e, "scalar") == 0) return static_cast<int>(Isa::kScalar);
  if (std::strcmp(e, "avx2") == 0) return static_cast<int>(Isa::kAvx2);
  if (std::strcmp(e, "avx512") == 0) return static_cast<int>(Isa::kAvx512);
  std::fprintf(stderr, "ragkv: RAGKV_ISA=%s is not one of scalar, avx2, avx512\n", e);
  std::abort();
}

std::atomic<int>& OverrideRef() {
  static std::atomic<int> v{IsaFromEnv()};
  return v;
}

int DefaultThreads() {
  const int n = omp_get_num_procs();
  return n > 0 ? n : 1;
}

std::atomic<int>& MaxThreadsRef() {
  static std::atomic<int> v{DefaultThreads()};
  return v;
}

}  // namespace

Isa DetectedIsa() {
  static const Isa isa = Detect();
  return isa;
}

Isa ActiveIsa() {
  const int o = OverrideRef().load(std::memory_order_relaxed);
  const int d = static_cast<int>(DetectedIsa());
  return static_cast<Isa>(o < d ? o : d);
}

void SetIsaOverride(Isa isa) { OverrideRef().store(static_cast<int>(isa)); }

Isa IsaCap() { return static_cast<Isa>(OverrideRef().load(std::memory_order_relaxed)); }

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

void SetMaxThreads(int n) {
  if (n < 1) n = 1;
  MaxThreadsRef().store(n);
  openblas_set_num_threads(n);
}

int MaxThreads() { return MaxThreadsRef().load(std::memory_order_relaxed); }

}  // namespace ragkv::kernels
