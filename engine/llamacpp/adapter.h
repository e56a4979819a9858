// adapter.h: writing ragkv's K/V into a llama.cpp context through its
// public state API (llama_state_seq_set_data), for the pinned llama.cpp.
// First slice of issue 18's adapter: the layout probe and the handover of
// a sequence's KV; fetching fused KV from the sidecar and the fallbacks come
// next (docs/engines.md).
// Thread safety: a llama_context is used by one thread at a time.
#ifndef RAGKV_ENGINE_LLAMACPP_ADAPTER_H_
#define RAGKV_ENGINE_LLAMACPP_ADAPTER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/llamacpp/seq_state.h"
#include "model/config.h"

struct llama_context;

namespace ragkv::engine::llamacpp {

// ProbeLayout: what `ctx` caches per cell (layers, K/V widths and types,
// whether V is transposed), read from the state of a one-token decode.
// Clears the context's memory (call it before serving).
absl::StatusOr<SeqStateLayout> ProbeLayout(llama_context* ctx);
// ProbeLayout with a check: refuses, naming both sides, a context whose
// layout is not `config`'s (RoPE pairing, layers, kv width, sliding window
// and the global / SWA split of a two-section state). For a two-section
// state it sets the layout's window and swa_layers from `config`, so that
// LoadSeqKv writes each section's cells (docs/gemma3.md section 3).
absl::StatusOr<SeqStateLayout> ProbeLayout(llama_context* ctx, const model::ModelConfig& config);

// LoadSeqKv: replaces sequence `seq`'s cells with `kv` (positions kv.pos0..)
// through llama_state_seq_set_data. FAILED_PRECONDITION when llama.cpp
// does not take the state (no free cells, layout mismatch).
absl::Status LoadSeqKv(llama_context* ctx, int32_t seq, const SeqStateLayout& layout,
                       const SeqKv& kv);
// LoadSeqKv with the caller's scratch for the state blob (its capacity kept
// across calls).
absl::Status LoadSeqKv(llama_context* ctx, int32_t seq, const SeqStateLayout& layout,
                       const SeqKv& kv, std::string* scratch);

}  // namespace ragkv::engine::llamacpp

#endif  // RAGKV_ENGINE_LLAMACPP_ADAPTER_H_
