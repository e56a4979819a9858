// model.h: Model, the Llama-family decoder runtime on ragkv::kernels.
//
// A Model is immutable after Create: it owns f32 weights (q/k/v and gate/up
// fused for one GEMM each) and its fingerprint. All compute goes through
// kernels/ (Gemm, RmsNorm, SwiGlu, ApplyRope, SelectiveAttention, Convert).
//
// Two levels of API:
//  * sequence level: Prefill (T tokens at positions p..p+T-1, batched as
//    GEMMs, appended to a KVCache) and DecodeStep (one token);
//  * layer level, for blend/: Embed -> ForwardLayer(l) for l = 0..L-1 ->
//    FinalNormAndLogits. ForwardLayer runs one transformer block for any
//    subset of rows (hidden states + absolute positions) against a given
//    per-layer KV, so a layer can be recomputed for 15% of the tokens only.
//    Prefill is exactly this composition with all rows.
//
// Thread safety: all methods are const and may run concurrently, provided
// each concurrent call has its own Workspace and its own output buffers /
// KV cache. OpenMP parallelism inside the kernels is capped by
// kernels::SetMaxThreads.
#ifndef RAGKV_MODEL_MODEL_H_
#define RAGKV_MODEL_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/attention.h"
#include "kernels/tensor.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace ragkv::model {

using Fingerprint = std::array<uint8_t, 16>;

// FingerprintHex: 32 lowercase hex digits.
std::string FingerprintHex(const Fingerprint& fp);

// Workspace: scratch buffers reused across calls (grow-only), so the hot
// path allocates only when a call needs more rows than any before it. One
// per thread; not thread-safe. Opaque to callers.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // bytes: the memory currently held.
  size_t bytes() const;

 private:
  friend class Model;
  float* Get(std::vector<float>& buf, size_t n) {
    if (buf.size() < n) buf.resize(n);
    return buf.data();
  }
  std::vector<float> xb_, qkv_, att_, ffn_, ffn_out_, hidden_, logits_norm_, gather_, gather_kv_;
  std::vector<int32_t> positions_, kv_rows_;
  // Mixture of experts: router probabilities, the k picks and weights per
  // row, and the (row, weight) pairs grouped by expert.
  std::vector<float> moe_probs_, moe_weights_, moe_pair_w_;
  std::vector<int32_t> moe_experts_, moe_pair_row_, moe_offsets_;
};

struct LayerOptions {
  // Mask used by attention; kExact (row at position p sees keys 0..p) is
  // the correct one. kBottomRight exists to measure the shortcut's error.
  kernels::CausalMode causal = kernels::CausalMode::kExact;
  // Optional outputs of the rows' fresh (post-RoPE) K and V, each f32
  // [kv_heads, rows, head_dim] with unit last stride (data == nullptr: not
  // written). Same values ForwardLayer scatters into the KV view.
  kernels::TensorView fresh_k;
  kernels::TensorView fresh_v;
  // Optional per-row flags ([rows], nullptr = all 0): 1 means the row's
  // post-RoPE K/V for this layer already sit in the KV view at its position
  // (loaded and re-rotated where they cannot differ from a recompute, e.g.
  // layer 0, whose input is the token embedding; or just written by a
  // deviation probe), so only the row's Q is projected and its K/V are
  // neither recomputed nor overwritten. fresh_k/fresh_v then receive the
  // cached values for those rows.
  const uint8_t* kv_in_cache = nullptr;
  // Optional output of a mixture-of-experts block: the router's softmax
  // probabilities, f32 [rows, n_experts] row-major (nullptr: not written;
  // ignored by dense models). Lets a caller see near ties in the routing.
  float* router_probs = nullptr;
};

// Where Prefill writes logits.
enum class LogitsMode {
  kNone = 0,  // no logits (precompute only needs the KV)
  kLast = 1,  // logits of the last token: [vocab]
  kAll = 2,   // logits of every token: [T, vocab]
};

class Model {
 public:
  // Create: validates `config` against the weight sizes (InvalidArgument
  // naming the tensor on mismatch), takes ownership of the weights and
  // computes the fingerprint (docs/design.md §3): XXH3-128 over a canonical
  // description (arch, dims, head layout, RoPE theta/layout/scaling, norm
  // eps, KV dtype) followed by every weight's f32 bytes in a fixed order,
  // the effective classifier included (so a tied and an untied copy of the
  // same weights fingerprint alike).
  static absl::StatusOr<std::unique_ptr<Model>> Create(ModelConfig config, ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const Fingerprint& fingerprint() const { return fingerprint_; }
  std::string fingerprint_hex() const { return FingerprintHex(fingerprint_); }

  // ---- layer level --------------------------------------------------------

  // Embed: hidden[r, :] = embedding of tokens[r]. hidden: f32 [rows, dim],
  // unit column stride, rows == tokens.size(). InvalidArgument for an id
  // outside [0, vocab).
  absl::Status Embed(absl::Span<const int32_t> tokens, kernels::TensorView hidden) const;

  // ForwardLayer: runs transformer block `layer` for `rows` rows.
  //   hidden: f32 [rows, dim], unit column stride; in: the block's input,
  //           out: its output (residual stream), in place.
  //   positions: [rows] absolute positions, each in [0, kv.num_tokens()).
  //   kv: this layer's K/V of all N context tokens. The rows' fresh K/V are
  //       written into it at their positions *before* attention (what was
  //       there is overwritten: copy it first if you need it); every other
  //       token's K/V is read as given. Row r attends to keys 0..positions[r]
  //       (CausalMode::kExact).
  // Rows may be in any order and need not be contiguous positions; two rows
  // must not share a position. Computes in f32 with GEMMs over all rows.
  absl::Status ForwardLayer(int layer, kernels::TensorView hidden, const int32_t* positions,
                            LayerKVView kv, const LayerOptions& options, Workspace* ws) const;

  // ProjectKV: the post-RoPE K and V block `layer` would produce for rows
  // whose layer input is `hidden` (f32 [rows, dim]) at `positions`, without
  // attention or MLP. k_out, v_out: f32 [kv_heads, rows, head_dim], unit last
  // stride. Cheap deviation probe for blending.
  absl::Status ProjectKV(int layer, kernels::TensorView hidden, const int32_t* positions,
                         kernels::TensorView k_out, kernels::TensorView v_out,
                         Workspace* ws) const;

  // ProjectQ: the post-RoPE queries block `layer` would compute for rows
  // whose layer input is `hidden` (f32 [rows, dim]) at `positions`. q_out:
  // f32 [rows, n_heads * head_dim], unit column stride (head h at columns
  // h*head_dim..). Used to score context rows by the query's attention.
  absl::Status ProjectQ(int layer, kernels::TensorView hidden, const int32_t* positions,
                        kernels::TensorView q_out, Workspace* ws) const;

  // FinalNormAndLogits: logits = classifier(RMSNorm(hidden)). hidden: f32
  // [rows, dim] (unchanged); logits: f32 [rows, vocab], unit column stride.
  absl::Status FinalNormAndLogits(kernels::TensorView hidden, kernels::TensorView logits,
                                  Workspace* ws) const;

  // ---- sequence level -----------------------------------------------------

  // Prefill: runs tokens at positions p..p+T-1, p = cache->num_tokens(),
  // appending their K/V; afterwards cache->num_tokens() == p+T. logits: see
  // LogitsMode (may be null for kNone). Errors: InvalidArgument for empty
  // input or a bad id; OutOfRange when p+T exceeds the cache capacity or the
  // model's context length (max_seq_len). On error the cache's num_tokens is
  // unchanged (slots past it may have been written).
  absl::Status Prefill(absl::Span<const int32_t> tokens, KVCache* cache, Workspace* ws,
                       LogitsMode mode, float* logits) const;

  // DecodeStep: Prefill of one token with logits [vocab].
  absl::Status DecodeStep(int32_t token, KVCache* cache, Workspace* ws, float* logits) const {
    return Prefill(absl::MakeConstSpan(&token, 1), cache, ws, LogitsMode::kLast, logits);
  }

  // NewCache: a KV cache sized for `capacity_tokens` (default: max_seq_len).
  absl::StatusOr<KVCache> NewCache(int64_t capacity_tokens = 0) const;

  // MatmulFlops: FLOPs of the weight GEMMs for `tokens` rows of all layers
  // (2 * rows * params), excluding the classifier; AttentionFlops: QK^T and
  // PV FLOPs of a causal prefill of `tokens` tokens starting at position 0.
  double MatmulFlops(int64_t tokens) const;
  double AttentionFlops(int64_t tokens) const;

 private:
  Model() = default;
  // ComputeQKV: ws->qkv_ [rows, q_dim + 2*kv_dim] = RoPE(RMSNorm(hidden) *
  // Wqkv^T + b), by column block: q for every row if want_q; k|v if want_kv,
  // for the rows whose kv_in_cache flag is 0 (every row if null). Blocks not
  // computed are left unspecified.
  absl::Status ComputeQKV(int layer, kernels::TensorView hidden, const int32_t* positions,
                          int64_t rows, bool want_q, bool want_kv, const uint8_t* kv_in_cache,
                          Workspace* ws) const;
  // MoeFfn: hidden[r] += the mixture-of-experts FFN of xb[r] (f32 [rows,
  // dim] contiguous, the normalized block input; rows = hidden.shape[0])
  // (model/moe_ffn.cc): route, group the rows by expert, one GEMM per
  // expert and matrix over its rows, weighted scatter-add. router_probs:
  // LayerOptions's output.
  absl::Status MoeFfn(int layer, const float* xb, kernels::TensorView hidden, float* router_probs,
                      Workspace* ws) const;
  // GemmaTail: the rest of a post-norm (gemma3) block after attention
  // (model/gemma_block.cc): hidden += RMSNorm(att Wo) * post_attn_norm; then
  // hidden += RMSNorm(GeGLU(RMSNorm(hidden) * ffn_norm)) * post_ffn_norm.
  // att: f32 [rows, q_dim] contiguous; rows = hidden.shape[0].
  absl::Status GemmaTail(int layer, const float* att, kernels::TensorView hidden,
                         Workspace* ws) const;

  ModelConfig config_;
  // Weights as loaded, except that per layer f32 wq/wk/wv (and bq/bk/bv)
  // are moved into wqkv_ and f32 w_gate/w_up into wgate_up_ (then empty here).
  ModelWeights weights_;
  // Fused per-layer f32 matrices: [q_dim + 2*kv_dim, dim], [2*hidden_dim, dim].
  std::vector<std::vector<float>> wqkv_, bqkv_, wgate_up_;
  // Part: a weight whose rows are output columns [col0, col0 + w.rows) of a
  // projection that spans several matrices (q|k|v, gate|up).
  struct Part {
    kernels::WeightMatrix w;
    int64_t col0 = 0;
  };
  // LayerMats: the matrices each layer multiplies by, in their encodings
  // (one fused f32 part, or one part per encoded matrix).
  struct LayerMats {
    std::vector<Part> qkv, gate_up;
    kernels::WeightMatrix wo, down;
    // Mixture of experts: the router [E, dim] and one row view per expert
    // into the stacked tensors (gate/up [hidden, dim], down [dim, hidden]).
    kernels::WeightMatrix router;
    std::vector<kernels::WeightMatrix> x_gate, x_up, x_down;
  };
  std::vector<LayerMats> mats_;
  kernels::WeightMatrix emb_, cls_;
  // ProjectParts: out[:, j - col0] = x * W^T over output columns
  // [col0, col0 + cols) of `parts` (+ beta * out).
  static absl::Status ProjectParts(const std::vector<Part>& parts, kernels::TensorView x,
                                   int64_t col0, int64_t cols, float* out, int64_t ldo,
                                   float beta = 0.0f);
  absl::Status BuildMats();
  Fingerprint fingerprint_{};
};

}  // namespace ragkv::model

#endif  // RAGKV_MODEL_MODEL_H_
