// gguf_moe.h: the mixture-of-experts metadata of a GGUF (qwen3moe, and
// llama with llama.expert_count, as Mixtral is written), read as the pinned
// llama.cpp reads it, and what this runtime refuses by name
// (docs/model.md "Mixture of experts"). Private to model/.
#ifndef RAGKV_MODEL_INTERNAL_GGUF_MOE_H_
#define RAGKV_MODEL_INTERNAL_GGUF_MOE_H_

#include <string>

#include "absl/status/status.h"
#include "model/config.h"
#include "model/internal/gguf_file.h"

namespace ragkv::model::internal {

// ReadGgufMoe: fills c->n_experts / n_experts_used and, for a MoE file,
// c->hidden_dim = the experts' inner size (qwen3moe:
// expert_feed_forward_length, else feed_forward_length / expert_used_count,
// as llama.cpp; llama: feed_forward_length). A file without experts leaves
// c unchanged (qwen3moe without expert_count is InvalidArgument).
// Unimplemented, naming the key, for what the pinned llama.cpp does not
// compute for these architectures or ragkv does not: a gating function
// other than softmax, expert_weights_norm false, expert_weights_scale other
// than 0 or 1, shared experts, expert groups, per-layer expert counts.
absl::Status ReadGgufMoe(const Gguf& g, const std::string& path, const std::string& arch,
                         ModelConfig* c);

// RefuseMoeTensors: Unimplemented naming the tensor when the file carries
// expert tensors this runtime does not compute: shared experts
// (ffn_*_shexp, ffn_gate_inp_shexp), a selection bias (exp_probs_b), a
// fused ffn_gate_up_exps (the pinned llama.cpp reads none of them for
// qwen3moe or llama), or expert tensors in a file without experts.
absl::Status RefuseMoeTensors(const Gguf& g, const std::string& path, const ModelConfig& c);

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_GGUF_MOE_H_
