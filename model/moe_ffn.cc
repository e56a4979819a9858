// Model::MoeFfn: the mixture-of-experts FFN of a block (docs/model.md
// "Mixture of experts"), kept apart from model.cc's dense path.
#include <algorithm>
#include <cstring>

#include "base/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/weight_gemm.h"
#include "model/internal/moe_router.h"
#include "model/internal/views.h"
#include "model/model.h"

namespace ragkv::model {
using internal::View2D;

absl::Status Model::MoeFfn(int layer, const float* xb, kernels::TensorView hidden,
                           float* router_probs, Workspace* ws) const {
  const ModelConfig& c = config_;
  const LayerMats& lm = mats_[layer];
  const int64_t rows = hidden.shape[0], dim = c.dim, ffn = c.hidden_dim, ldh = hidden.stride[0];
  const int n_exp = c.n_experts, k = c.n_experts_used;
  // Route: logits -> softmax -> top-k with renormalised weights.
  float* probs = ws->Get(ws->moe_probs_, rows * n_exp);
  RETURN_IF_ERROR(kernels::WeightGemm(View2D(xb, rows, dim, dim), lm.router,
                                      View2D(probs, rows, n_exp, n_exp)));
  ws->moe_experts_.resize(rows * k);
  float* weights = ws->Get(ws->moe_weights_, rows * k);
  internal::RouteTopK(probs, rows, n_exp, k, probs, ws->moe_experts_.data(), weights);
  if (router_probs != nullptr) std::memcpy(router_probs, probs, rows * n_exp * sizeof(float));
  // Group the (row, weight) pairs by expert (counting sort; rows ascending
  // within an expert).
  ws->moe_offsets_.assign(2 * (n_exp + 1), 0);
  int32_t* off = ws->moe_offsets_.data();     // [n_exp + 1]: expert e's pairs at [off[e], off[e+1])
  int32_t* next = off + n_exp + 1;            // [n_exp]: the next free slot of each expert
  for (int64_t i = 0; i < rows * k; ++i) ++off[ws->moe_experts_[i] + 1];
  for (int e = 0; e < n_exp; ++e) off[e + 1] += off[e];
  std::memcpy(next, off, n_exp * sizeof(int32_t));
  ws->moe_pair_row_.resize(rows * k);
  float* pair_w = ws->Get(ws->moe_pair_w_, rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < k; ++i) {
      const int32_t slot = next[ws->moe_experts_[r * k + i]]++;
      ws->moe_pair_row_[slot] = static_cast<int32_t>(r);
      pair_w[slot] = weights[r * k + i];
    }
  }
  // Each expert: gather its rows, gate|up GEMMs, SwiGLU, down GEMM, then
  // hidden[row] += weight * out[row].
  int64_t most = 0;
  for (int e = 0; e < n_exp; ++e) most = std::max<int64_t>(most, off[e + 1] - off[e]);
  float* gx = ws->Get(ws->gather_, most * dim);
  float* gu = ws->Get(ws->ffn_, most * 2 * ffn);
  float* out = ws->Get(ws->ffn_out_, most * dim);
  for (int e = 0; e < n_exp; ++e) {
    const int64_t n = off[e + 1] - off[e];
    if (n == 0) continue;
    const int32_t* rows_e = ws->moe_pair_row_.data() + off[e];
    const float* x = xb;  // every row, in order: no gather needed
    if (n != rows) {
      for (int64_t i = 0; i < n; ++i) std::memcpy(gx + i * dim, xb + rows_e[i] * dim, dim * sizeof(float));
      x = gx;
    }
    const kernels::TensorView xv = View2D(x, n, dim, dim);
    const kernels::TensorView gate = View2D(gu, n, ffn, 2 * ffn), up = View2D(gu + ffn, n, ffn, 2 * ffn);
    RETURN_IF_ERROR(kernels::WeightGemm(xv, lm.x_gate[e], gate));
    RETURN_IF_ERROR(kernels::WeightGemm(xv, lm.x_up[e], up));
    RETURN_IF_ERROR(kernels::SwiGlu(gate, up, gate));
    RETURN_IF_ERROR(kernels::WeightGemm(gate, lm.x_down[e], View2D(out, n, dim, dim)));
    for (int64_t i = 0; i < n; ++i) {
      float* h = hidden.as<float>() + rows_e[i] * ldh;
      const float* o = out + i * dim;
      const float w = pair_w[off[e] + i];
      for (int64_t j = 0; j < dim; ++j) h[j] += w * o[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace ragkv::model
