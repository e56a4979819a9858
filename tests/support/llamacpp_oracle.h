// llamacpp_oracle.h: the pinned llama.cpp (cmake/FindLlamaCpp.cmake) as a
// test oracle and benchmark baseline: load a GGUF, run a prompt through
// llama_decode and read the logits, continue greedily, tokenize, quantize a
// file with llama.cpp's own quantizer, and dequantize rows with ggml's own
// to_float. Only tests and benches link it (tests/support/); no library does.
//
// Thread safety: LlamaCppModel is used by one thread at a time; the free
// functions may be called from any thread (backend init runs once).
#ifndef RAGKV_TESTS_SUPPORT_LLAMACPP_ORACLE_H_
#define RAGKV_TESTS_SUPPORT_LLAMACPP_ORACLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct llama_model;
struct llama_context;

namespace ragkv::testing {

// InitLlamaCpp: llama_backend_init + ggml_backend_load_all_from_path(the
// pinned library dir), once per process; quiet logging unless
// RAGKV_LLAMACPP_LOG=1. Returns the library dir.
const std::string& InitLlamaCpp();

class LlamaCppModel {
 public:
  struct Options {
    int n_ctx = 512;
    int threads = 1;
    bool flash_attn = false;
    // KV cache element type: f16 (llama.cpp's default) or f32 (exact).
    bool kv_f32 = false;
    // Vocabulary only (the ggml-vocab-*.gguf files): Tokenize works, no
    // context is made.
    bool vocab_only = false;
  };
  static absl::StatusOr<std::unique_ptr<LlamaCppModel>> Load(const std::string& path,
                                                              const Options& options);
  ~LlamaCppModel();

  int vocab_size() const;
  // Logits: clears the context, decodes `tokens` at positions 0..n-1 in one
  // batch; the logits of every position ([n][vocab]) when `all`, else of the
  // last one ([vocab]).
  absl::StatusOr<std::vector<float>> Logits(const std::vector<int32_t>& tokens, bool all);
  // Greedy: clears, decodes `prompt`, then `n` greedy tokens (argmax, ties to
  // the lowest id); returns the n new ids.
  absl::StatusOr<std::vector<int32_t>> Greedy(const std::vector<int32_t>& prompt, int n);
  // Tokenize: llama_tokenize with the model's vocabulary.
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text, bool add_special,
                                                bool parse_special) const;

  llama_model* model() const { return model_; }
  llama_context* context() const { return ctx_; }

 private:
  LlamaCppModel() = default;
  absl::Status Decode(const std::vector<int32_t>& tokens, int32_t pos0, bool all);

  llama_model* model_ = nullptr;
  llama_context* ctx_ = nullptr;
};

// LlamaCppQuantize: llama_model_quantize(in -> out) to `ftype` (a
// llama_ftype value, e.g. 7 = MOSTLY_Q8_0, 2 = MOSTLY_Q4_0, 15 = Q4_K_M).
absl::Status LlamaCppQuantize(const std::string& in, const std::string& out, int ftype);

// GgmlDequantize: ggml's own to_float for `type` (a ggml_type value) over
// `n` elements of `data` (n a multiple of the type's block size).
absl::StatusOr<std::vector<float>> GgmlDequantize(int type, const void* data, int64_t n);
// GgmlQuantizeRef: ggml's reference quantizer (from_float_ref) for `type`:
// the bytes of `x` (n a multiple of the block size) in that type's blocks.
absl::StatusOr<std::string> GgmlQuantizeRef(int type, const float* x, int64_t n);

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_SUPPORT_LLAMACPP_ORACLE_H_
