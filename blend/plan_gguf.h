// plan_gguf.h: a planner architecture from a GGUF file's header alone.
//
// `ragkv plan --model F.gguf` reads only the GGUF header (metadata and tensor
// infos, streamed; no tensor data, no mapping), so a file the runtime cannot
// run (a MoE, MLA or sliding-window model, a quantisation ragkv does not
// load, a file whose data is absent) is still plannable. Keys (llama.cpp's
// names, `<arch>.` prefixed): block_count, embedding_length,
// feed_forward_length, attention.head_count / head_count_kv / key_length /
// value_length, vocab_size (else token_embd.weight's rows, else the
// tokenizer's token count), expert_count, expert_used_count,
// expert_feed_forward_length (else feed_forward_length, as Mixtral's llama
// files), expert_shared_count, expert_shared_feed_forward_length,
// leading_dense_block_count, attention.q_lora_rank / kv_lora_rank and
// rope.dimension_count (MLA, deepseek2), attention.sliding_window (gemma3:
// every 6th layer global; gpt-oss: every 2nd; other architectures: every
// layer sliding), full_attention_interval and ssm.group_count /
// time_step_rank / state_size / inner_size (qwen3next's linear layers).
// Bytes per weight: the mean over the 2-D+ tensors of their ggml type's
// size (experts, "*_exps", separately); 2 (bf16) when the file lists no
// tensors. Thread-compatible.
#ifndef RAGKV_BLEND_PLAN_GGUF_H_
#define RAGKV_BLEND_PLAN_GGUF_H_

#include <string>

#include "absl/status/statusor.h"
#include "blend/plan_arch.h"

namespace ragkv::blend {

// ArchFromGgufHeader: the architecture described by `path`'s header.
// NotFound for a missing file; InvalidArgument naming the problem for a
// file that is not GGUF v2/v3, is truncated inside the header, or lacks a
// required key (block_count, embedding_length, attention.head_count).
absl::StatusOr<ModelArch> ArchFromGgufHeader(const std::string& path);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLAN_GGUF_H_
