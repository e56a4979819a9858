#include "kernels/cpu.h"

#include <omp.h>

#include <atomic>

#include "kernels/internal/isa.h"

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

std::atomic<int>& OverrideRef() {
  static std::atomic<int> v{static_cast<int>(Isa::kAvx512)};
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

namespace internal {
const IsaTable& ActiveTable() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return Avx512Table();
    case Isa::kAvx2: return Avx2Table();
    case Isa::kScalar: break;
  }
  return BaselineTable();
}
}  // namespace internal

}  // namespace ragkv::kernels
