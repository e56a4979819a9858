// Gemma 3's block pieces (docs/gemma3.md section 2): the post-norm tail of
// Model::ForwardLayer and the helpers of model/internal/gemma.h. Source of
// the math: llama_model_gemma3::graph (src/models/gemma3.cpp of the pinned
// llama.cpp).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/weight_gemm.h"
#include "model/internal/gemma.h"
#include "model/internal/views.h"
#include "model/model.h"

namespace ragkv::model {
namespace {

using internal::View2D;

kernels::TensorView Vec(const std::vector<float>& w) {
  return kernels::TensorView::Contiguous(w.data(), kernels::DType::kF32,
                                         {static_cast<int64_t>(w.size())});
}

// AddNormed: hidden[r] += RMSNorm(x[r]) * w (x: [rows, dim] contiguous,
// normalized in place).
absl::Status AddNormed(float* x, const std::vector<float>& w, float eps, kernels::TensorView hidden) {
  const int64_t rows = hidden.shape[0], dim = hidden.shape[1];
  const kernels::TensorView xv = View2D(x, rows, dim, dim);
  RETURN_IF_ERROR(kernels::RmsNorm(xv, Vec(w), eps, xv));
  for (int64_t r = 0; r < rows; ++r) {
    float* h = hidden.as<float>() + r * hidden.stride[0];
    const float* xr = x + r * dim;
    for (int64_t j = 0; j < dim; ++j) h[j] = xr[j] + h[j];
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Model::GemmaTail(int layer, const float* att, kernels::TensorView hidden,
                              Workspace* ws) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const LayerMats& lm = mats_[layer];
  const int64_t rows = hidden.shape[0], dim = c.dim, qd = c.q_dim(), ffn = c.hidden_dim;
  // Attention: o = att Wo; hidden += RMSNorm(o) * post_attn_norm.
  float* tmp = ws->Get(ws->ffn_out_, rows * dim);
  RETURN_IF_ERROR(kernels::WeightGemm(View2D(att, rows, qd, qd), lm.wo, View2D(tmp, rows, dim, dim)));
  RETURN_IF_ERROR(AddNormed(tmp, w.post_attn_norm, c.norm_eps, hidden));
  // FFN: a = act(RMSNorm(hidden) * ffn_norm Wgate, .. Wup); f = a Wdown;
  // hidden += RMSNorm(f) * post_ffn_norm.
  float* xb = ws->Get(ws->xb_, rows * dim);
  RETURN_IF_ERROR(kernels::RmsNorm(hidden, Vec(w.ffn_norm), c.norm_eps, View2D(xb, rows, dim, dim)));
  float* gu = ws->Get(ws->ffn_, rows * 2 * ffn);
  RETURN_IF_ERROR(ProjectParts(lm.gate_up, View2D(xb, rows, dim, dim), 0, 2 * ffn, gu, 2 * ffn));
  const kernels::TensorView gate = View2D(gu, rows, ffn, 2 * ffn), up = View2D(gu + ffn, rows, ffn, 2 * ffn);
  if (c.ffn_act == ModelConfig::FfnAct::kGeGluTanhGgml) {
    RETURN_IF_ERROR(kernels::GeGluGgml(gate, up, gate));
  } else {
    RETURN_IF_ERROR(kernels::SwiGlu(gate, up, gate));
  }
  RETURN_IF_ERROR(kernels::WeightGemm(gate, lm.down, View2D(tmp, rows, dim, dim)));
  return AddNormed(tmp, w.post_ffn_norm, c.norm_eps, hidden);
}

namespace internal {

absl::Status CheckPostNorms(const ModelConfig& c, const LayerWeights& w, const std::string& p) {
  for (const auto& [v, name] : {std::pair{&w.post_attn_norm, "post_attn_norm"},
                                std::pair{&w.post_ffn_norm, "post_ffn_norm"}}) {
    const size_t want = c.post_norms ? static_cast<size_t>(c.dim) : 0;
    if (v->size() != want) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model weights: tensor %s%s has %d elements, config implies %d", p, name, v->size(), want));
    }
  }
  return absl::OkStatus();
}

std::string GemmaFingerprintText(const ModelConfig& c) {
  if (c.arch != "gemma3") return "";
  return absl::StrFormat(
      "sliding_window=%d\nswa_pattern=%d\nrope_theta_swa=%.9g\nrope_freq_scale=%.9g\n"
      "attn_scale=%.9g\nembed_scale=%.9g\nfinal_softcap=%.9g\nffn_act=%d\npost_norms=%d\n",
      c.sliding_window, c.swa_pattern, c.rope_theta_swa, c.rope_freq_scale, c.attn_scale,
      c.embed_scale, c.final_softcap, static_cast<int>(c.ffn_act), c.post_norms ? 1 : 0);
}

absl::Status Softcap(float cap, kernels::TensorView logits) {
  if (cap == 0.0f) return absl::OkStatus();
  const float inv = 1.0f / cap;
  for (int64_t r = 0; r < logits.shape[0]; ++r) {
    float* x = logits.as<float>() + r * logits.stride[0];
    for (int64_t j = 0; j < logits.shape[1]; ++j) x[j] = std::tanh(x[j] * inv) * cap;
  }
  return absl::OkStatus();
}

double VisiblePairs(int64_t tokens, int window) {
  const double t = static_cast<double>(tokens);
  if (window <= 0 || window >= tokens) return t * (t + 1) / 2.0;
  const double w = window;  // p < w: p + 1 keys; then w each
  return w * (w + 1) / 2.0 + (t - w) * w;
}

}  // namespace internal
}  // namespace ragkv::model
