// llama_engine.h: LlamaCppEngine, a llama.cpp context whose prompt KV comes
// from a ragkv sidecar (issue 18). Prefill asks the sidecar to blend the
// prompt (the connector's Blend stream), writes the fused rows into
// llama.cpp's cache for one sequence (adapter.h), and lets llama.cpp decode
// only the prompt's last token, yielding the next-token logits. Never a
// wrong answer: when the sidecar is unreachable, times out, sends a
// layout or fingerprint that is not this model's, or a stream that fails,
// llama.cpp prefills the whole prompt itself; the result names the fallback.
//
// Not yet (issue 18, open): raw-token chunk matching, per-chunk partial
// fallback, `ragkv llama`, `ragkv bench engine`.
// Thread safety: one Prefill at a time per engine (a llama_context is
// single-threaded).
#ifndef RAGKV_ENGINE_LLAMACPP_LLAMA_ENGINE_H_
#define RAGKV_ENGINE_LLAMACPP_LLAMA_ENGINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "connector/client.h"
#include "engine/llamacpp/seq_state.h"

struct llama_context;

namespace ragkv::engine::llamacpp {

class LlamaCppEngine {
 public:
  struct Options {
    llama_context* ctx = nullptr;      // required, not owned
    Client* sidecar = nullptr;         // null: always prefill locally
    // The ragkv fingerprint of the file llama.cpp runs (model::Model::
    // fingerprint of the same GGUF); the sidecar's must equal it. Required.
    std::string model_fingerprint;
    absl::Duration deadline = absl::Seconds(30);
  };
  struct Result {
    std::vector<int32_t> prompt;  // the prompt llama.cpp now holds
    std::vector<float> logits;    // next-token logits after it
    int reused_tokens = 0;        // rows written from the sidecar's KV
    int recomputed_tokens = 0;    // of those, recomputed by the sidecar
    int prefilled_tokens = 0;     // tokens llama.cpp computed itself
    std::string fallback;         // why llama.cpp prefilled (empty: it did not)
    double blend_ms = 0, handover_ms = 0, decode_ms = 0;
  };

  // Create: probes the context's cache layout (clears its memory).
  static absl::StatusOr<std::unique_ptr<LlamaCppEngine>> Create(Options options);

  // Prefill: `request` blends `prompt` (its segments' tokens, the query
  // last, add_bos as the caller wants it reflected in `prompt`); the fused
  // KV replaces sequence `seq`. Errors only when llama.cpp itself fails.
  absl::StatusOr<Result> Prefill(const v1::BlendRequest& request,
                                 const std::vector<int32_t>& prompt, int32_t seq);

  // fallbacks: how many Prefill calls fell back to a local prefill.
  int64_t fallbacks() const { return fallbacks_; }
  const SeqStateLayout& layout() const { return layout_; }

 private:
  LlamaCppEngine(Options o, SeqStateLayout l) : o_(std::move(o)), layout_(l) {}
  absl::Status FromSidecar(const v1::BlendRequest& request, const std::vector<int32_t>& prompt,
                           int32_t seq, Result* r);
  absl::Status LocalPrefill(const std::vector<int32_t>& prompt, int32_t seq, Result* r);

  Options o_;
  SeqStateLayout layout_;
  int64_t fallbacks_ = 0;
};

}  // namespace ragkv::engine::llamacpp

#endif  // RAGKV_ENGINE_LLAMACPP_LLAMA_ENGINE_H_
