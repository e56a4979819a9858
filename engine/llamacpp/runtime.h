// runtime.h: llama.cpp opened for serving, for the pinned version: the
// backends loaded once per process from the pinned library directory
// (ggml_backend_load_all_from_path, before any model), a GGUF with one
// context, tokenize / detokenize, and greedy decoding from a prefilled
// sequence. What `ragkv llama` and `ragkv bench engine` run.
// Thread safety: InitBackends is thread-safe; a LlamaFile is used by one
// thread at a time (its llama_context is single-threaded).
#ifndef RAGKV_ENGINE_LLAMACPP_RUNTIME_H_
#define RAGKV_ENGINE_LLAMACPP_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct llama_model;
struct llama_context;

namespace ragkv::engine::llamacpp {

// LibDir: $RAGKV_LLAMACPP_LIB_DIR, else the pinned install cmake found.
std::string LibDir();
// InitBackends: loads llama.cpp's CPU backends from LibDir() once; its log
// stays quiet (errors only) unless RAGKV_LLAMACPP_LOG=1.
void InitBackends();

// BlendRefusal: why ragkv must not blend the GGUF at `path`, "" when it may
// (llama.cpp reads its header and vocabulary only). A model whose layers
// keep per-sequence recurrent state (llama_model_is_recurrent: Mamba, RWKV;
// llama_model_is_hybrid: Qwen3-Next, Qwen3.5, Jamba, ...) has no per-token
// KV that a chunk computed alone could contribute to another prompt: its
// state is refused for blending by name, and served by llama.cpp's own
// prefill. gemma3 is refused too, by name, until its sliding-window blend
// rule and two-section handover (docs/gemma3.md) are implemented.
// InvalidArgument when llama.cpp cannot read the file.
absl::StatusOr<std::string> BlendRefusal(const std::string& path);

// DecodeTokens: llama.cpp decodes tokens[begin..) of sequence `seq` at
// positions begin.. (in batches of the context's n_batch); the logits of the
// last `tail` tokens (1 <= tail <= tokens.size() - begin) into *logits,
// [tail][vocab]. Errors: llama_decode failures.
absl::Status DecodeTokens(llama_context* ctx, const std::vector<int32_t>& tokens, size_t begin,
                          int32_t seq, size_t tail, std::vector<float>* logits);

// ContextOptions: llama.cpp's own defaults (llama_context_default_params:
// batch 2048, micro-batch 512, flash attention auto) unless set.
struct ContextOptions {
  enum class FlashAttn { kAuto, kOff, kOn };  // kOff: V cached transposed
  int n_ctx = 4096;     // cells of the context (all sequences)
  int n_batch = 2048;   // tokens per llama_decode call
  int n_ubatch = 512;   // tokens per micro-batch
  int threads = 1;
  FlashAttn flash_attn = FlashAttn::kAuto;
  int contexts = 1;     // independent contexts over the one model
  // sequences: parallel sequences of one context (the server's slots). The
  // KV cache is unified (one stream all sequences share; the handover,
  // seq_state.h, writes one stream), so n_ctx cells are shared among them.
  int sequences = 1;
};

class LlamaFile {
 public:
  // Open: the GGUF at `path` on the CPU, one context. InvalidArgument when
  // llama.cpp cannot load it.
  static absl::StatusOr<std::unique_ptr<LlamaFile>> Open(const std::string& path,
                                                         const ContextOptions& options);
  ~LlamaFile();
  LlamaFile(const LlamaFile&) = delete;
  LlamaFile& operator=(const LlamaFile&) = delete;

  llama_model* model() const { return model_; }
  llama_context* context(int i = 0) const { return ctx_[i]; }
  int vocab_size() const;
  // Text: the detokenized ids (special tokens left out).
  std::string Text(const std::vector<int32_t>& ids) const;
  // GreedyFrom: in context 0, from `logits` (after position pos-1 of sequence seq), up to
  // n greedy tokens (argmax, ties to the lowest id), each decoded at pos..;
  // stops after an end-of-generation token. Errors: llama_decode failures.
  absl::StatusOr<std::vector<int32_t>> GreedyFrom(std::vector<float> logits, int32_t pos,
                                                  int32_t seq, int n);

 private:
  LlamaFile() = default;
  llama_model* model_ = nullptr;
  std::vector<llama_context*> ctx_;
};

}  // namespace ragkv::engine::llamacpp

#endif  // RAGKV_ENGINE_LLAMACPP_RUNTIME_H_
