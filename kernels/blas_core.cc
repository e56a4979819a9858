#include "kernels/blas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "kernels/cpu.h"

namespace ragkv::kernels {
namespace {

// Rank: how wide the f32 kernels of an OpenBLAS core are, for the x86
// cores ragkv may meet (lower-case, as openblas_get_corename spells them):
// 3 AVX-512 with BF16, 2 AVX-512, 1 AVX2, 0 anything older or unknown.
int Rank(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "cooperlake" || name == "sapphirerapids") return 3;
  if (name == "skylakex") return 2;
  if (name == "haswell" || name == "zen" || name == "excavator") return 1;
  return 0;
}

bool HasBf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") != 0;
}

}  // namespace

std::string PreferredBlasCore() {
  const Isa isa = DetectedIsa() < IsaCap() ? DetectedIsa() : IsaCap();
  if (isa == Isa::kAvx512) return HasBf16() ? "Cooperlake" : "SkylakeX";
  if (isa == Isa::kAvx2) return "Haswell";
  return "";
}

std::string BlasCoreUpgrade() {
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (set != nullptr && *set != '\0') return "";
  const char* current = openblas_get_corename();
  std::string best = PreferredBlasCore();
  if (best.empty() || current == nullptr || Rank(current) >= Rank(best)) return "";
  return best;
}

void RestartWithBlasCore(char** argv) {
  const std::string core = BlasCoreUpgrade();
  if (core.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", core.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  std::perror("ragkv: re-executing with OPENBLAS_CORETYPE set");
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace ragkv::kernels
