// llama_engine.h: LlamaCppEngine, a llama.cpp context whose prompt KV comes
// from a ragkv sidecar (issue 18; docs/engines.md). Prefill asks the sidecar
// to blend the prompt (the connector's Blend stream: explicit segments, or
// the whole prompt as raw tokens in which the sidecar finds its chunks),
// writes the fused rows into llama.cpp's cache for one sequence
// (adapter.h), and lets llama.cpp decode the rest, yielding the next-token
// logits.
//
// Never a wrong answer: rows the sidecar did not deliver intact are
// prefilled by llama.cpp itself. The sidecar unreachable, a deadline, an
// error status, a stream cut mid-way (the sidecar killed), a layer failing
// its checksum, a layout or fingerprint that is not this file's: the whole
// prompt is prefilled here. A raw prompt in which the sidecar finds no
// stored chunk (NOT_FOUND), or a request with
// BlendOptions.not_found_when_cold of which nothing is stored, is
// prefilled here too, and is not a fallback.
// A fused prompt that agrees with the engine's
// only up to token p: rows 0..p-1 are used (causal: they do not depend on
// what follows) and llama.cpp prefills from p. The result says what came
// from where and why; fallbacks() counts each fallback.
//
// Thread safety: one Prefill / Apply at a time per engine (a llama_context
// is single-threaded); Fetch is thread-safe.
#ifndef RAGKV_ENGINE_LLAMACPP_LLAMA_ENGINE_H_
#define RAGKV_ENGINE_LLAMACPP_LLAMA_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "connector/client.h"
#include "engine/llamacpp/seq_state.h"
#include "model/config.h"

struct llama_context;

namespace ragkv::engine::llamacpp {

class LlamaCppEngine {
 public:
  struct Options {
    llama_context* ctx = nullptr;      // required, not owned
    Client* sidecar = nullptr;         // null: llama.cpp prefills every prompt (not a fallback)
    // The ragkv fingerprint of the file llama.cpp runs (model::Model::
    // fingerprint of the same GGUF); the sidecar's must equal it. Required.
    std::string model_fingerprint;
    // ragkv's config of the same file: when set, Create also refuses a
    // context whose RoPE pairing, layer count or KV width is not its own
    // (ProbeLayout(ctx, config)). Not owned.
    const model::ModelConfig* config = nullptr;
    absl::Duration deadline = absl::Seconds(30);
    // on_layer: progress, called as fused layer `layer` arrives (0..L-1).
    std::function<void(int layer)> on_layer;
    // local_tail: the trailing prompt tokens llama.cpp always decodes itself
    // (>= 1; e.g. the query: the sidecar then supplies only context rows).
    // Result.logits holds the logits of each of them.
    int local_tail = 1;
  };
  struct Result {
    std::vector<int32_t> prompt;  // the prompt llama.cpp now holds
    std::vector<float> logits;    // [local_tail][vocab]: after each of the last local_tail tokens
    int handed_over_tokens = 0;   // rows written from the sidecar's fused KV
    int reused_tokens = 0;        // of those, rows of chunks the store served
    int recomputed_tokens = 0;    // rows the sidecar computed (mean over layers >= 1)
    double applied_ratio = 0;     // the CacheBlend ratio the sidecar applied (0: other modes)
    int prefilled_tokens = 0;     // tokens llama.cpp computed itself
    std::string fallback;         // why llama.cpp prefilled more than the last token
    double blend_ms = 0;          // the Blend stream, header to summary
    double handover_ms = 0;       // encoding + llama_state_seq_set_data
    double decode_ms = 0;         // llama.cpp's own llama_decode of the rest
  };

  // Create: probes the context's cache layout (clears its memory).
  static absl::StatusOr<std::unique_ptr<LlamaCppEngine>> Create(Options options);

  // Prefill: `request` blends `prompt` (its segments' tokens, the query
  // last, add_bos as the caller wants it reflected in `prompt`); the fused
  // KV replaces sequence `seq`. Errors only when llama.cpp itself fails.
  absl::StatusOr<Result> Prefill(const v1::BlendRequest& request,
                                 const std::vector<int32_t>& prompt, int32_t seq);
  // PrefillRaw: the same with the whole prompt sent as raw tokens (the
  // sidecar finds its stored chunks inside it); the last `query_tokens`
  // are the query. `options` as in BlendRequest (add_bos must be false).
  absl::StatusOr<Result> PrefillRaw(const std::vector<int32_t>& prompt, uint32_t query_tokens,
                                    const v1::BlendOptions& options, int32_t seq);

  // Fetched: the sidecar's answer to one Blend request (the fused layers as
  // received), held between Fetch and Apply.
  struct Fetched {
    absl::Status status;  // the stream's; not OK: Apply prefills locally
    // nothing_stored_ok: NOT_FOUND (nothing of the prompt stored) means
    // llama.cpp's own prefill by design, not a fallback: a raw prompt, or
    // BlendOptions.not_found_when_cold.
    bool nothing_stored_ok = false;
    FusedPromptInfo info;
    BlendStats stats;
    std::vector<std::string> k, v;  // per layer: [H][T][D] F32 or F16 bytes
    size_t layers = 0;
    int32_t type = 0;  // ggml type of k / v
    double blend_ms = 0;
  };
  // Prefill in two halves, so that the Blend stream can run while the
  // context serves other sequences (the HTTP server's slots):
  // Fetch: `request`'s Blend stream. Touches no llama_context: callable on
  // any thread, several at once (on_layer is called on the calling
  // thread); without a sidecar its status is FAILED_PRECONDITION.
  // `cancelled` (optional) is asked at the header and at each layer: true
  // stops the stream there (status CANCELLED), so a request whose client
  // left frees its slot within one layer of its blend.
  std::unique_ptr<Fetched> Fetch(const v1::BlendRequest& request,
                                 const std::function<bool()>& cancelled = nullptr) const;
  // Apply: on the context's thread, what Prefill does with a finished
  // stream: the rows of `fetched` that agree with `prompt` into sequence
  // `seq` (with Prefill's fallbacks), llama.cpp decodes the rest.
  absl::StatusOr<Result> Apply(std::unique_ptr<Fetched> fetched,
                               const std::vector<int32_t>& prompt, int32_t seq);
  // Place: Apply without llama.cpp's decode, for a caller that decodes the
  // rest in batches of its own (the HTTP server's decode steps): sequence
  // `seq` holds prompt rows 0..handed_over_tokens-1 (none, and cleared, on
  // a fallback or when nothing was stored); the caller decodes the last
  // prefilled_tokens of `prompt`. Result.logits is empty, decode_ms 0.
  absl::StatusOr<Result> Place(std::unique_ptr<Fetched> fetched,
                               const std::vector<int32_t>& prompt, int32_t seq);

  // fallbacks: how many Prefill / Apply calls prefilled more than the last token.
  int64_t fallbacks() const { return fallbacks_; }
  const SeqStateLayout& layout() const { return layout_; }

 private:
  LlamaCppEngine(Options o, SeqStateLayout l) : o_(std::move(o)), layout_(l) {}
  // FetchInto: runs the Blend stream into *f (its buffers reused).
  void FetchInto(const v1::BlendRequest& request, Fetched* f,
                 const std::function<bool()>& cancelled) const;
  // Handover: hands over the rows of `prompt` the sidecar delivered intact;
  // returns how many (0..prompt.size()-1).
  absl::StatusOr<int64_t> Handover(const Fetched& f, const std::vector<int32_t>& prompt,
                                   int32_t seq, Result* r);
  absl::Status CheckPrompt(const std::vector<int32_t>& prompt) const;
  // Settle: the fallback decision (a sequence without handed-over rows is
  // cleared); Result.prefilled_tokens: the rows left to decode.
  Result Settle(absl::StatusOr<int64_t> got, bool nothing_stored_ok,
                const std::vector<int32_t>& prompt, int32_t seq, Result r);
  // DecodeRest: llama.cpp decodes the last r.prefilled_tokens of `prompt`
  // into `seq` (the logits of its last local_tail tokens into r.logits).
  absl::StatusOr<Result> DecodeRest(const std::vector<int32_t>& prompt, int32_t seq, Result r);
  // Complete: Settle, then DecodeRest.
  absl::StatusOr<Result> Complete(absl::StatusOr<int64_t> got, bool nothing_stored_ok,
                                  const std::vector<int32_t>& prompt, int32_t seq, Result r);

  Options o_;
  SeqStateLayout layout_;
  int64_t fallbacks_ = 0;
  // Buffers kept across calls (their pages stay mapped): the fused layers
  // as received, and the state blob handed to llama.cpp.
  std::vector<std::string> k_buf_, v_buf_;
  std::string blob_;
};

}  // namespace ragkv::engine::llamacpp

#endif  // RAGKV_ENGINE_LLAMACPP_LLAMA_ENGINE_H_
