// bench_prefill.h: the `ragkv bench prefill` benchmark as a library function.
//
// For each prompt length T it times a full prefill (fresh KV cache, logits of
// the last token only) and compares it with a roofline bound measured in the
// same run: bound = model FLOPs (weight GEMMs + causal attention + the last
// row's classifier) / the sgemm ceiling, where the ceiling is the best
// GFLOP/s of kernels::Gemm on an N x N x N product. fraction = bound /
// measured time (1.0 = the prefill runs as fast as one big sgemm).
// Not thread-safe with other kernel users (it sets kernels::SetMaxThreads
// when asked to).
#ifndef RAGKV_BENCH_MODEL_BENCH_PREFILL_H_
#define RAGKV_BENCH_MODEL_BENCH_PREFILL_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::model {

struct PrefillBenchOptions {
  // Model path (any LoadModel format), "synthetic:<spec>", or "moe:<spec>" / "gemma3:<spec>"
  // (a seeded random GGUF, bench/model/synthetic_gguf.h).
  std::string model = "synthetic:layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000";
  std::vector<int> tokens = {512, 2048, 4096};  // prompt lengths
  int repeats = 3;      // timed runs per length (after one warm-up); best is reported
  int sgemm_n = 2048;   // size of the square sgemm that defines the ceiling
  int threads = 0;      // > 0: kernels::SetMaxThreads(threads); 0: leave as is
  // compare = "llama.cpp": the same file, prompt and thread count through the
  // pinned llama.cpp's llama_decode (dlopen'ed from llamacpp_dir, default
  // LlamaCppRunner::DefaultLibDir()), interleaved with ragkv's runs; GGUF only.
  std::string compare;
  std::string llamacpp_dir;
  // llamacpp_cpu: llama.cpp's CPU variant to load alone (e.g. "haswell", its
  // AVX2 build, beside RAGKV_ISA=avx2); empty: the best for this CPU.
  std::string llamacpp_cpu;
  // encoding of a synthetic model under --compare (and of a moe: one): it is written as a GGUF
  // (f32, f16, or quantized by llama.cpp: q8_0, q4_0, q4_k_m, ...) into a
  // temp file both engines load. Ignored for a real --model file.
  std::string encoding = "f16";
};

struct PrefillBenchRow {
  int64_t tokens = 0;
  double best_s = 0, median_s = 0;
  double tokens_per_s = 0;    // tokens / best_s
  double model_gflop = 0;     // FLOPs of one prefill / 1e9
  double achieved_gflops = 0; // model_gflop / best_s
  double bound_s = 0;         // model FLOPs / sgemm ceiling
  double fraction = 0;        // bound_s / best_s
  // With compare = "llama.cpp" (0 otherwise).
  double llamacpp_best_s = 0, llamacpp_median_s = 0, llamacpp_tokens_per_s = 0;
  double ratio = 0;           // ragkv tokens/s / llama.cpp tokens/s (best runs)
};

struct PrefillBenchResult {
  std::string model;         // config DebugString
  std::string fingerprint;   // hex
  int threads = 0;
  double sgemm_gflops = 0;   // the ceiling (best before/after the prefills)
  std::vector<PrefillBenchRow> rows;
  // With compare: resident memory each engine added for the model, a cache of
  // the longest prompt and one prefill of it (VmRSS deltas), and decode
  // tokens/s (16 steps after the shortest prompt, decode_context tokens;
  // the median of `repeats` interleaved runs; reported, no target).
  int64_t ragkv_rss_bytes = -1, llamacpp_rss_bytes = -1, file_bytes = -1;
  std::string llamacpp_cpu;  // the CPU variant loaded alone, or empty: the best
  double ragkv_decode_tokens_per_s = 0, llamacpp_decode_tokens_per_s = 0;
  int decode_context = 0;
};

// RunPrefillBench: InvalidArgument for a bad spec / empty token list;
// loader errors pass through.
absl::StatusOr<PrefillBenchResult> RunPrefillBench(const PrefillBenchOptions& options);

// PrintPrefillBench: a human-readable table (one line per length).
void PrintPrefillBench(const PrefillBenchResult& result, std::ostream& out);

}  // namespace ragkv::model

#endif  // RAGKV_BENCH_MODEL_BENCH_PREFILL_H_
