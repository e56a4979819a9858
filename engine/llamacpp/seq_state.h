// seq_state.h: llama.cpp's per-sequence KV state (what llama_state_seq_get_data
// returns and llama_state_seq_set_data takes) for the pinned version
// (node-llama-cpp 3.21.1; src/llama-kv-cache.cpp state_write), so that
// ragkv's K/V can be written into a llama.cpp context. Pure byte code: no
// llama.h here (engine/llamacpp/adapter.h talks to llama.cpp). Format in
// docs/engines.md:
//
//   u32 magic (0xaf143cd8, llama-context.cpp's io_magic); i32 seq_id (the
//   writer's; the reader places the cells in its own sequence);
//   u32 n_stream; per stream: u32 cell_count; when > 0:
//     cells:  cell_count x { i32 pos, u32 n_seq_id (1), i32 seq_id }
//     data:   u32 v_trans, u32 n_layer,
//             n_layer x { i32 k_type, u64 k_row_bytes, cell_count K rows },
//             v_trans == 0: n_layer x { i32 v_type, u64 v_row_bytes, cell_count V rows }
//             v_trans == 1: n_layer x { i32 v_type, u32 v_elem_bytes, u32 n_embd_v,
//                                       n_embd_v x cell_count elements }
//
// A K row of a cell is [kv_head][head_dim] (n_embd_k_gqa values) of
// k_type; types are ggml's (0 = F32, 1 = F16; the only ones written here).
//
// A context with sliding-window layers (llama.cpp's iSWA cache: gemma3
// with a window) writes two such sections after the header, each from
// u32 n_stream on: the global layers' (every cell of the sequence), then
// the SWA layers' (only the cells within n_swa of the sequence's last
// position: llama_kv_cache::state_write drops SWA-masked cells); each
// section's n_layer counts its own layers, in ascending model order
// (docs/gemma3.md section 3).
// Thread safety: pure functions.
#ifndef RAGKV_ENGINE_LLAMACPP_SEQ_STATE_H_
#define RAGKV_ENGINE_LLAMACPP_SEQ_STATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::engine::llamacpp {

inline constexpr uint32_t kSeqStateMagic = 0xaf143cd8;
inline constexpr int32_t kGgmlF32 = 0;
inline constexpr int32_t kGgmlF16 = 1;

// SeqStateLayout: what a llama.cpp context caches per cell, read from a
// state blob of that context (ParseSeqStateLayout).
struct SeqStateLayout {
  uint32_t n_layer = 0;
  uint32_t n_embd_k = 0;  // n_kv_heads * head_dim of K
  uint32_t n_embd_v = 0;
  int32_t k_type = kGgmlF16;
  int32_t v_type = kGgmlF16;
  bool v_trans = false;   // V stored transposed (no flash attention)
  // Sliding-window (two-section) state. Parsed: two_sections, n_layer_swa
  // (of n_layer, the second section's layers), the cell counts of the blob
  // parsed (cells; cells_swa of the second section). Set by
  // ProbeLayout(ctx, config) for encoding: window (llama.cpp's n_swa) and
  // swa_layers (per model layer, config.IsSwaLayer).
  bool two_sections = false;
  uint32_t n_layer_swa = 0;
  uint32_t cells = 0, cells_swa = 0;
  int32_t window = 0;
  std::vector<bool> swa_layers;
};

// ParseSeqStateLayout: the layout of a single-stream state blob holding at
// least one cell. INVALID_ARGUMENT for a blob it cannot read, UNIMPLEMENTED
// for what ragkv does not write (several streams, cell extensions, K/V
// types other than F32/F16).
absl::StatusOr<SeqStateLayout> ParseSeqStateLayout(std::string_view blob);

// SeqKv: the K/V of `num_tokens` cells at positions pos0.. of one sequence,
// per layer [n_kv_heads][num_tokens][head_dim] (ragkv's KV record layout;
// heads head_stride elements apart, e.g. the first cells of a longer
// layer), elements of `type` (F32 or F16; converted when llama.cpp caches
// the other), n_kv_heads * head_dim == layout.n_embd_k.
struct SeqKv {
  int32_t pos0 = 0;
  int64_t num_tokens = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t head_stride = 0;  // 0: num_tokens * head_dim (packed)
  int32_t type = kGgmlF32;
  std::vector<const void*> k;  // n_layer pointers
  std::vector<const void*> v;
};

// EncodeSeqState: the state blob of `kv` for sequence `seq_id` in `layout`.
// A two-section layout writes the global layers' section with every cell,
// then the SWA layers' with the last min(window, num_tokens) cells: the
// blob llama.cpp writes after prefilling the same positions.
// INVALID_ARGUMENT when kv does not fit the layout (layers, widths; a
// two-section layout without window / swa_layers matching its counts).
absl::StatusOr<std::string> EncodeSeqState(const SeqStateLayout& layout, int32_t seq_id,
                                           const SeqKv& kv);
// EncodeSeqStateInto: the same into *blob, reusing its capacity.
absl::Status EncodeSeqStateInto(const SeqStateLayout& layout, int32_t seq_id, const SeqKv& kv,
                                std::string* blob);

}  // namespace ragkv::engine::llamacpp

#endif  // RAGKV_ENGINE_LLAMACPP_SEQ_STATE_H_
