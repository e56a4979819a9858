#include "engine/llamacpp/adapter.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "llama.h"

namespace ragkv::engine::llamacpp {

absl::StatusOr<SeqStateLayout> ProbeLayout(llama_context* ctx) {
  llama_memory_t mem = llama_get_memory(ctx);
  llama_memory_clear(mem, true);
  llama_token tok = 0;
  if (llama_decode(ctx, llama_batch_get_one(&tok, 1)) != 0) {
    return absl::FailedPreconditionError("llama.cpp: the layout probe's one-token decode failed");
  }
  std::string blob(llama_state_seq_get_size(ctx, 0), '\0');
  const size_t n = llama_state_seq_get_data(ctx, reinterpret_cast<uint8_t*>(blob.data()),
                                            blob.size(), 0);
  llama_memory_clear(mem, true);
  if (n == 0 || n > blob.size()) return absl::InternalError("llama.cpp: no sequence state");
  blob.resize(n);
  return ParseSeqStateLayout(blob);
}

absl::StatusOr<SeqStateLayout> ProbeLayout(llama_context* ctx, const model::ModelConfig& config) {
  // RoPE pairing: llama.cpp's NORM rotates interleaved pairs (GGUF llama),
  // NEOX the two halves (qwen2/qwen3); ragkv's keys must be rotated alike.
  const llama_rope_type rt = llama_model_rope_type(llama_get_model(ctx));
  const bool interleaved = config.rope_layout == kernels::RopeLayout::kInterleaved;
  if (!((rt == LLAMA_ROPE_TYPE_NORM && interleaved) || (rt == LLAMA_ROPE_TYPE_NEOX && !interleaved))) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "llama.cpp rotates keys with RoPE type %d; ragkv's model pairs them %s: the cached keys "
        "would not be llama.cpp's",
        static_cast<int>(rt), interleaved ? "interleaved (NORM)" : "by halves (NEOX)"));
  }
  ASSIGN_OR_RETURN(SeqStateLayout l, ProbeLayout(ctx));
  const uint32_t kv = static_cast<uint32_t>(config.n_kv_heads * config.head_dim);
  if (l.n_layer != static_cast<uint32_t>(config.n_layers) || l.n_embd_k != kv || l.n_embd_v != kv) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "llama.cpp caches %d layers x K %d / V %d per cell; ragkv's model has %d x %d: not the "
        "same model",
        l.n_layer, l.n_embd_k, l.n_embd_v, config.n_layers, kv));
  }
  // Sliding window (docs/gemma3.md section 3): llama.cpp's window and the
  // split of its state into global / SWA sections must be the model's.
  const int32_t n_swa = llama_model_n_swa(llama_get_model(ctx));
  int swa_layers = 0;
  for (int il = 0; il < config.n_layers; ++il) swa_layers += config.IsSwaLayer(il);
  if (config.sliding_window > 0 &&
      (n_swa != config.sliding_window || !l.two_sections ||
       l.n_layer_swa != static_cast<uint32_t>(swa_layers))) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "llama.cpp's sliding window is %d with %s state (%d SWA layers); ragkv's model has window "
        "%d over %d SWA layers: not the same model",
        n_swa, l.two_sections ? "a two-section" : "a one-section", l.n_layer_swa,
        config.sliding_window, swa_layers));
  }
  if (config.sliding_window == 0 && l.two_sections) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "llama.cpp caches %d layers in a sliding-window section (window %d); ragkv's model has "
        "no window: not the same model",
        l.n_layer_swa, n_swa));
  }
  if (l.two_sections) {
    l.window = config.sliding_window;
    for (int il = 0; il < config.n_layers; ++il) l.swa_layers.push_back(config.IsSwaLayer(il));
  }
  return l;
}

absl::Status LoadSeqKv(llama_context* ctx, int32_t seq, const SeqStateLayout& layout,
                       const SeqKv& kv) {
  std::string blob;
  return LoadSeqKv(ctx, seq, layout, kv, &blob);
}

absl::Status LoadSeqKv(llama_context* ctx, int32_t seq, const SeqStateLayout& layout,
                       const SeqKv& kv, std::string* scratch) {
  RETURN_IF_ERROR(EncodeSeqStateInto(layout, seq, kv, scratch));
  const std::string& blob = *scratch;
  llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1);
  const size_t read = llama_state_seq_set_data(
      ctx, reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), seq);
  if (read != blob.size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "llama.cpp took %d of %d bytes of sequence state (no room for %d cells, or a layout "
        "mismatch)",
        read, blob.size(), kv.num_tokens));
  }
  return absl::OkStatus();
}

}  // namespace ragkv::engine::llamacpp
