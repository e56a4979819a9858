// gemma.h: the pieces of Gemma 3's block (GGUF arch gemma3,
// docs/gemma3.md) that Model::Create and the forward share, kept out of
// model.cc (model/gemma_block.cc). Private to model/.
#ifndef RAGKV_MODEL_INTERNAL_GEMMA_H_
#define RAGKV_MODEL_INTERNAL_GEMMA_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/tensor.h"
#include "model/config.h"
#include "model/weights.h"

namespace ragkv::model::internal {

// CheckPostNorms: with c.post_norms, w's post_attn_norm / post_ffn_norm are
// [dim] each; without, both are empty. InvalidArgument naming the tensor
// (prefix p, e.g. "layers.3.").
absl::Status CheckPostNorms(const ModelConfig& c, const LayerWeights& w, const std::string& p);

// GemmaFingerprintText: for arch gemma3, the fingerprint's extra canonical
// lines (window, pattern, both RoPE bases, scaling, attention / embedding
// scales, softcap, activation, post norms); "" for every other arch, so
// their fingerprints do not change.
std::string GemmaFingerprintText(const ModelConfig& c);

// Softcap: logits = cap * tanh(logits * (1 / cap)) in f32, as llama.cpp's
// gemma3 graph (ggml_scale, ggml_tanh, ggml_scale); cap == 0: unchanged.
// logits: f32 [rows, vocab], unit column stride.
absl::Status Softcap(float cap, kernels::TensorView logits);

// VisiblePairs: (query, key) pairs a causal prefill of `tokens` tokens from
// position 0 attends to on one layer with `window` (0 = none): sum over p
// of min(p + 1, window).
double VisiblePairs(int64_t tokens, int window);

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_GEMMA_H_
