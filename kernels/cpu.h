// cpu.h: CPU feature dispatch and the explicit OpenMP thread cap.
//
// Every kernel that uses OpenMP runs with at most MaxThreads() threads and
// never nests parallel regions. The cap is process-wide; set it once from
// main (or a test fixture). Thread-safe (atomics).
#ifndef RAGKV_KERNELS_CPU_H_
#define RAGKV_KERNELS_CPU_H_

namespace ragkv::kernels {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// DetectedIsa: best instruction set this CPU supports (AVX2 needs FMA and F16C).
Isa DetectedIsa();
// ActiveIsa: the set kernels dispatch to: DetectedIsa() unless lowered by
// SetIsaOverride (tests use it to cover every path on one machine) or by the
// environment variable RAGKV_ISA=scalar|avx2|avx512, read once at first use
// (an unknown value aborts with a message). CI's `avx2` stage sets it to run
// the AVX2 kernels on AVX-512 machines.
Isa ActiveIsa();
// SetIsaOverride: clamp dispatch to at most `isa`. Not for use while kernels run.
void SetIsaOverride(Isa isa);
// IsaCap: the current clamp (the last SetIsaOverride, else RAGKV_ISA's, else
// kAvx512 = none); ActiveIsa() is min(DetectedIsa(), IsaCap()).
Isa IsaCap();
const char* IsaName(Isa isa);

// AmxActive: whether int8 products (Q8_0 weights) may run on AMX tiles: the
// CPU has AMX-INT8, Linux granted this process the tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once), ActiveIsa() is kAvx512, and
// neither SetAmxEnabled(false) nor RAGKV_AMX=0 turned it off.
bool AmxActive();
// AmxDetected: the CPU and the OS support AMX-INT8 (whatever the caps).
bool AmxDetected();
// SetAmxEnabled: tests use it to cover the non-AMX int8 path on AMX machines.
void SetAmxEnabled(bool on);

// VnniPanelsActive: whether prefill rows of quantized weights multiply in
// int8 on AVX-512 VNNI panels (where AMX is not active; docs/kernels.md
// "AVX-512 VNNI panels"): ActiveIsa() is kAvx512, the CPU has AVX512-VNNI,
// AmxActive() is false, and neither SetVnniPanelsEnabled(false) nor
// RAGKV_VNNI_PANELS=0 turned it off. Otherwise such rows dequantize a tile
// and run sgemm.
bool VnniPanelsActive();
// VnniActive: the CPU has AVX512-VNNI and neither SetVnniEnabled(false) nor
// RAGKV_VNNI=0 hid it: the int8 decode tiles and the prefill panels use
// vpdpbusd. Hidden, an AVX-512 run takes the paths of an AVX-512 CPU without
// VNNI (Skylake-SP / X): the AVX2 decode tiles and the AVX-512BW panels
// (on an AMX CPU, with AMX off too); tests and benches use it to cover
// those CPUs on a newer one.
bool VnniActive();
void SetVnniEnabled(bool on);
// VnniDetected: the CPU has AVX512-VNNI (whatever the switch).
bool VnniDetected();
// BwPanelsActive: whether prefill rows of quantized weights multiply in int8
// on AVX-512BW panels (vpmaddubsw, docs/kernels.md "AVX2 panels"):
// ActiveIsa() is kAvx512, VnniActive() and AmxActive() are false, and the
// panel switch below is on.
bool BwPanelsActive();
// Avx2PanelsActive: whether prefill rows of quantized weights multiply in
// int8 on AVX2 panels (docs/kernels.md "AVX2 panels"): ActiveIsa() is kAvx2
// (an AVX2-only CPU, or RAGKV_ISA=avx2), and the panel switch below is on.
bool Avx2PanelsActive();
// Int8PrefillActive: AmxActive() or one of the panels above is active:
// prefill rows of quantized weights multiply in int8 (activations rounded as
// llama.cpp rounds them).
bool Int8PrefillActive();
// SetVnniPanelsEnabled: the switch for the panels without AMX (the AVX-512
// VNNI, AVX-512BW and AVX2 ones; RAGKV_VNNI_PANELS=0 turns it off at start): tests
// and benches compare them with dequantize-then-sgemm.
void SetVnniPanelsEnabled(bool on);

// SetMaxThreads: cap for OpenMP kernels (>= 1). Default: hardware threads.
void SetMaxThreads(int n);
int MaxThreads();

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_CPU_H_
