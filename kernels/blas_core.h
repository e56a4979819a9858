// blas_core.h: run OpenBLAS with the kernels this CPU can run.
//
// OpenBLAS picks its kernels ("core") once, when the library loads, from the
// CPU model number. A CPU newer than the library (Debian 12 ships 0.3.21)
// falls back to a generic SSE3 core: on a current Xeon with AVX-512 that is
// `Prescott`, and every f32 GEMM in ragkv runs at a fifth of its speed (the
// 16-layer F16 prefill: 105 tok/s instead of 588). The documented override
// is the environment variable OPENBLAS_CORETYPE, read only at load time, so
// a binary's main re-executes itself with it set (docs/kernels.md "The
// OpenBLAS core").
#ifndef RAGKV_KERNELS_BLAS_CORE_H_
#define RAGKV_KERNELS_BLAS_CORE_H_

#include <string>

namespace ragkv::kernels {

// PreferredBlasCore: the OpenBLAS core for an instruction set as ragkv dispatches
// it (DetectedIsa() capped by RAGKV_ISA): "Cooperlake" (AVX-512 with BF16),
// "SkylakeX" (AVX-512), "Haswell" (AVX2 + FMA), or "" (scalar: keep
// OpenBLAS's choice).
std::string PreferredBlasCore();

// BlasCoreUpgrade: PreferredBlasCore() when OpenBLAS's own choice
// (BlasCoreName()) is a weaker core and OPENBLAS_CORETYPE is unset (a value
// the user set is kept, whatever it is); "" otherwise.
std::string BlasCoreUpgrade();

// RestartWithBlasCore: when BlasCoreUpgrade() names a core, sets
// OPENBLAS_CORETYPE to it and execv's /proc/self/exe with argv (same pid,
// same descriptors); returns only when there is nothing to do or the exec
// failed (then the process runs on with OpenBLAS's choice, slower). For
// mains only, first thing, before any thread starts.
void RestartWithBlasCore(char** argv);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_BLAS_CORE_H_
