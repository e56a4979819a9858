// llamacpp_runner.h: the pinned llama.cpp as a prefill baseline, loaded at
// run time with dlopen (so the ragkv binary never links it: `ragkv serve`
// does not depend on it). Loads a GGUF, decodes a prompt in one batch from
// an empty cache, reports the time. Built with the pinned headers when
// cmake found them (cmake/FindLlamaCpp.cmake); otherwise Open says so.
// One runner per thread.
#ifndef RAGKV_BENCH_MODEL_LLAMACPP_RUNNER_H_
#define RAGKV_BENCH_MODEL_LLAMACPP_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::model {

class LlamaCppRunner {
 public:
  // DefaultLibDir: $RAGKV_LLAMACPP_DIR or ~/.cache/ragkv/llamacpp-3.21.1,
  // + the package's linux-x64 library folder.
  static std::string DefaultLibDir();
  // Open: dlopen the libraries in lib_dir, load the CPU backends, load
  // `model_path` with a context of n_ctx tokens (one batch) and `threads`.
  // cpu_variant empty: the best CPU variant for this machine
  // (ggml_backend_load_all_from_path); else only lib_dir's
  // libggml-cpu-<cpu_variant>.so (e.g. "haswell": AVX2 on an AVX-512 box),
  // NotFound if it is missing or this CPU cannot run it.
  static absl::StatusOr<std::unique_ptr<LlamaCppRunner>> Open(const std::string& lib_dir,
                                                              const std::string& model_path,
                                                              int n_ctx, int threads,
                                                              const std::string& cpu_variant = "");
  ~LlamaCppRunner();
  // Prefill: clears the cache and decodes `tokens` (positions 0..n-1, logits
  // of the last only); returns seconds.
  absl::StatusOr<double> Prefill(const std::vector<int32_t>& tokens);
  // DecodeRate: prefill `prompt`, then `n` one-token decodes; tokens/s of those.
  absl::StatusOr<double> DecodeRate(const std::vector<int32_t>& prompt, int n);

  struct Impl;

 private:
  explicit LlamaCppRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ProcessRssBytes: this process's resident set (VmRSS), -1 if unknown.
int64_t ProcessRssBytes();

}  // namespace ragkv::model

#endif  // RAGKV_BENCH_MODEL_LLAMACPP_RUNNER_H_
