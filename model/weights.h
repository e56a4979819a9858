// weights.h: ModelWeights, the f32 tensors of a Llama-family decoder as the
// loaders produce them and Model::Create consumes them.
//
// Every matrix is row-major [out][in] (the layout of llama2.c, GGUF and
// Hugging Face checkpoints), so y = x * W^T. A matrix is either an owned f32
// vector or, from a GGUF, a view of the file's own encoding (e_* below, into
// the mapping `backing` keeps alive): then its vector is empty. Norms and
// biases are always f32 vectors. Thread-compatible.
#ifndef RAGKV_MODEL_WEIGHTS_H_
#define RAGKV_MODEL_WEIGHTS_H_

#include <memory>
#include <vector>

#include "kernels/weight_gemm.h"

namespace ragkv::model {

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> wq;         // [q_dim, dim]
  std::vector<float> wk;         // [kv_dim, dim]
  std::vector<float> wv;         // [kv_dim, dim]
  std::vector<float> bq, bk, bv; // [q_dim], [kv_dim], [kv_dim]; empty unless qkv_bias
  std::vector<float> q_norm, k_norm;  // [head_dim] each; empty unless qk_norm (Qwen3)
  std::vector<float> wo;         // [dim, q_dim]
  std::vector<float> ffn_norm;   // [dim]
  // Gemma 3 (config.post_norms): RMSNorm weights of the attention output
  // and of the FFN output; empty otherwise.
  std::vector<float> post_attn_norm, post_ffn_norm;  // [dim] each
  std::vector<float> w_gate;     // [hidden_dim, dim]   (llama2.c w1)
  std::vector<float> w_up;       // [hidden_dim, dim]   (llama2.c w3)
  std::vector<float> w_down;     // [dim, hidden_dim]   (llama2.c w2)
  // Mixture of experts (config.n_experts = E > 0; then w_gate/w_up/w_down
  // are empty): the router and the experts stacked, as a GGUF's 3-D
  // ffn_*_exps tensors are laid out. Expert e's gate/up are rows
  // [e*hidden_dim, (e+1)*hidden_dim) of x_gate/x_up, its down rows
  // [e*dim, (e+1)*dim) of x_down.
  std::vector<float> router;     // [E, dim]             (ffn_gate_inp)
  std::vector<float> x_gate;     // [E * hidden_dim, dim]
  std::vector<float> x_up;       // [E * hidden_dim, dim]
  std::vector<float> x_down;     // [E * dim, hidden_dim]
  // Encoded views (set instead of the vector of the same name).
  kernels::WeightMatrix e_wq, e_wk, e_wv, e_wo, e_gate, e_up, e_down;
  kernels::WeightMatrix e_router, e_x_gate, e_x_up, e_x_down;
};

struct ModelWeights {
  std::vector<float> tok_embeddings;  // [vocab, dim]
  std::vector<LayerWeights> layers;   // n_layers
  std::vector<float> final_norm;      // [dim]
  std::vector<float> classifier;      // [vocab, dim]; empty when shared_classifier
  kernels::WeightMatrix e_tok_embeddings, e_classifier;  // encoded views, or empty
  std::shared_ptr<const void> backing;  // what the views point into (a mapped file)
};

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_WEIGHTS_H_
