#include "kernels/cpu.h"

#include <cpuid.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

// DetectAmx: CPUID.(7,0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), then the
// kernel's permission for the tile data state (Linux >= 5.16).
bool DetectAmx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) return false;
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtileData) == 0;
}

std::atomic<bool>& AmxEnabledRef() {
  static std::atomic<bool> v{[] {
    const char* e = std::getenv("RAGKV_AMX");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }()};
  return v;
}

std::atomic<bool>& VnniPanelsRef() {
  static std::atomic<bool> v{[] {
    const char* e = std::getenv("RAGKV_VNNI_PANELS");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }()};
  return v;
}

std::atomic<bool>& VnniEnabledRef() {
  static std::atomic<bool> v{[] {
    const char* e = std::getenv("RAGKV_VNNI");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }()};
  return v;
}

bool DetectVnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") != 0;
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

bool AmxDetected() {
  static const bool amx = DetectAmx();
  return amx;
}

bool AmxActive() {
  return ActiveIsa() == Isa::kAvx512 && AmxEnabledRef().load(std::memory_order_relaxed) &&
         AmxDetected();
}

void SetAmxEnabled(bool on) { AmxEnabledRef().store(on); }

bool VnniDetected() {
  static const bool vnni = DetectVnni();
  return vnni;
}

bool VnniActive() { return VnniDetected() && VnniEnabledRef().load(std::memory_order_relaxed); }

void SetVnniEnabled(bool on) { VnniEnabledRef().store(on); }

bool VnniPanelsActive() {
  return VnniActive() && ActiveIsa() == Isa::kAvx512 && !AmxActive() &&
         VnniPanelsRef().load(std::memory_order_relaxed);
}

bool BwPanelsActive() {
  return !VnniActive() && ActiveIsa() == Isa::kAvx512 && !AmxActive() &&
         VnniPanelsRef().load(std::memory_order_relaxed);
}

void SetVnniPanelsEnabled(bool on) { VnniPanelsRef().store(on); }

bool Avx2PanelsActive() {
  return ActiveIsa() == Isa::kAvx2 && VnniPanelsRef().load(std::memory_order_relaxed);
}

bool Int8PrefillActive() {
  return AmxActive() || VnniPanelsActive() || BwPanelsActive() || Avx2PanelsActive();
}

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
}

int MaxThreads() { return MaxThreadsRef().load(std::memory_order_relaxed); }

}  // namespace ragkv::kernels
