#include "model/model.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "kernels/weight_gemm.h"
#include "model/internal/gemma.h"
#include "model/internal/views.h"

namespace ragkv::model {
namespace {

using kernels::DType;
using kernels::TensorView;
using internal::View2D;
using internal::View3D;

absl::Status CheckMatrix(const TensorView& v, int64_t cols, const char* what) {
  if (v.data == nullptr || v.dtype != DType::kF32 || v.rank != 2 || v.shape[1] != cols ||
      v.stride[1] != 1 || v.shape[0] < 0 || (v.shape[0] > 1 && v.stride[0] < cols)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected f32 [rows, ", cols,
                                                   "] with unit column stride, got ",
                                                   v.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckKV(const TensorView& v, int kv_heads, int head_dim, const char* what) {
  if (v.data == nullptr || v.dtype != DType::kF32 || v.rank != 3 || v.shape[0] != kv_heads ||
      v.shape[2] != head_dim || v.stride[2] != 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected f32 [", kv_heads, ", N, ",
                                                   head_dim, "] with unit last stride, got ",
                                                   v.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(const std::vector<float>& v, size_t want, const std::string& name) {
  if (v.size() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model weights: tensor %s has %d elements, config implies %d", name, v.size(), want));
  }
  return absl::OkStatus();
}

void HashFloats(XXH3_state_t* st, const std::vector<float>& v) {
  XXH3_128bits_update(st, v.data(), v.size() * sizeof(float));
}

// CheckMat: a [rows, cols] matrix given as an f32 vector or an encoded view.
absl::Status CheckMat(const std::vector<float>& v, const kernels::WeightMatrix& e, int64_t rows,
                      int64_t cols, const std::string& name) {
  if (e.empty()) return CheckSize(v, static_cast<size_t>(rows * cols), name);
  if (!v.empty()) {
    return absl::InvalidArgumentError("model weights: tensor " + name + " given twice");
  }
  if (e.rows != rows || e.cols != cols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model weights: tensor %s is [%d, %d], config implies [%d, %d]", name, e.rows, e.cols,
        rows, cols));
  }
  return absl::OkStatus();
}

// HashMat: a matrix's bytes as stored: f32 values (vector or f32 view: the
// same bytes), or for another encoding its ggml type id then its blocks.
void HashMat(XXH3_state_t* st, const std::vector<float>& v, const kernels::WeightMatrix& e) {
  if (e.empty()) return HashFloats(st, v);
  if (e.type != kernels::GgmlType::kF32) {
    const uint32_t t = static_cast<uint32_t>(e.type);
    XXH3_128bits_update(st, &t, sizeof(t));
  }
  XXH3_128bits_update(st, e.data, e.bytes());
}

// CheckFfn: a dense block's gate/up/down, or a MoE block's router and
// stacked experts (and then no dense FFN).
absl::Status CheckFfn(const ModelConfig& c, const LayerWeights& w, const std::string& p) {
  const size_t dim = c.dim, ffn = c.hidden_dim, e = c.n_experts;
  if (e == 0) {
    RETURN_IF_ERROR(CheckMat(w.w_gate, w.e_gate, ffn, dim, p + "w_gate"));
    RETURN_IF_ERROR(CheckMat(w.w_up, w.e_up, ffn, dim, p + "w_up"));
    return CheckMat(w.w_down, w.e_down, dim, ffn, p + "w_down");
  }
  if (!w.w_gate.empty() || !w.w_up.empty() || !w.w_down.empty() || !w.e_gate.empty() ||
      !w.e_up.empty() || !w.e_down.empty()) {
    return absl::InvalidArgumentError("model weights: " + p + " has a dense FFN and experts");
  }
  RETURN_IF_ERROR(CheckMat(w.router, w.e_router, e, dim, p + "router"));
  RETURN_IF_ERROR(CheckMat(w.x_gate, w.e_x_gate, e * ffn, dim, p + "x_gate"));
  RETURN_IF_ERROR(CheckMat(w.x_up, w.e_x_up, e * ffn, dim, p + "x_up"));
  return CheckMat(w.x_down, w.e_x_down, e * dim, ffn, p + "x_down");
}

}  // namespace

std::string FingerprintHex(const Fingerprint& fp) {
  std::string s;
  s.reserve(32);
  for (uint8_t b : fp) absl::StrAppendFormat(&s, "%02x", b);
  return s;
}

size_t Workspace::bytes() const {
  return (xb_.capacity() + qkv_.capacity() + att_.capacity() + ffn_.capacity() +
          ffn_out_.capacity() + hidden_.capacity() + logits_norm_.capacity() +
          gather_.capacity() + gather_kv_.capacity() + moe_probs_.capacity() +
          moe_weights_.capacity() + moe_pair_w_.capacity()) *
             sizeof(float) +
         (positions_.capacity() + kv_rows_.capacity() + moe_experts_.capacity() +
          moe_pair_row_.capacity() + moe_offsets_.capacity()) *
             sizeof(int32_t);
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(ModelConfig config, ModelWeights weights) {
  RETURN_IF_ERROR(config.Validate());
  const size_t dim = config.dim, qd = config.q_dim(), kvd = config.kv_dim(),
               ffn = config.hidden_dim, vocab = config.vocab_size;
  RETURN_IF_ERROR(CheckMat(weights.tok_embeddings, weights.e_tok_embeddings, vocab, dim,
                           "tok_embeddings"));
  RETURN_IF_ERROR(CheckSize(weights.final_norm, dim, "final_norm"));
  if (config.shared_classifier) {
    if (!weights.classifier.empty() || !weights.e_classifier.empty()) {
      return absl::InvalidArgumentError("model weights: classifier given but config says shared");
    }
  } else {
    RETURN_IF_ERROR(CheckMat(weights.classifier, weights.e_classifier, vocab, dim, "classifier"));
  }
  if (weights.layers.size() != size_t(config.n_layers)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model weights: %d layers, config says %d", weights.layers.size(), config.n_layers));
  }
  for (int l = 0; l < config.n_layers; ++l) {
    const LayerWeights& w = weights.layers[l];
    const std::string p = absl::StrCat("layers.", l, ".");
    RETURN_IF_ERROR(CheckSize(w.attn_norm, dim, p + "attn_norm"));
    RETURN_IF_ERROR(CheckMat(w.wq, w.e_wq, qd, dim, p + "wq"));
    RETURN_IF_ERROR(CheckMat(w.wk, w.e_wk, kvd, dim, p + "wk"));
    RETURN_IF_ERROR(CheckMat(w.wv, w.e_wv, kvd, dim, p + "wv"));
    if (config.qkv_bias) {
      RETURN_IF_ERROR(CheckSize(w.bq, qd, p + "bq"));
      RETURN_IF_ERROR(CheckSize(w.bk, kvd, p + "bk"));
      RETURN_IF_ERROR(CheckSize(w.bv, kvd, p + "bv"));
    }
    if (config.qk_norm) {
      RETURN_IF_ERROR(CheckSize(w.q_norm, config.head_dim, p + "q_norm"));
      RETURN_IF_ERROR(CheckSize(w.k_norm, config.head_dim, p + "k_norm"));
    }
    RETURN_IF_ERROR(CheckMat(w.wo, w.e_wo, dim, qd, p + "wo"));
    RETURN_IF_ERROR(CheckSize(w.ffn_norm, dim, p + "ffn_norm"));
    RETURN_IF_ERROR(CheckFfn(config, w, p));
    RETURN_IF_ERROR(internal::CheckPostNorms(config, w, p));
  }

  auto m = std::unique_ptr<Model>(new Model());
  m->config_ = config;

  // Fingerprint (docs/design.md §3). The canonical text is versioned; changing
  // anything here changes every fingerprint (and so invalidates stored KV).
  // v2: prompts get BOS by llama.cpp's rule (special_tokens.h), so records,
  // calibrations and embeddings made under v1 (BOS whenever the vocabulary
  // had one) are never served under v2 (docs/model.md, "Fingerprint").
  {
    XXH3_state_t* st = XXH3_createState();
    if (st == nullptr) return absl::ResourceExhaustedError("XXH3_createState failed");
    XXH3_128bits_reset(st);
    const std::string desc = absl::StrFormat(
        "ragkv-model-fingerprint-v2\narch=%s\ndim=%d\nhidden_dim=%d\nn_layers=%d\nn_heads=%d\n"
        "n_kv_heads=%d\nhead_dim=%d\nvocab=%d\nrope_theta=%.9g\nrope_layout=%s\n"
        "rope_scaling=%s\nnorm_eps=%.9g\nqkv_bias=%d\nkv_dtype=%s\nweights=f32\n",
        config.arch, config.dim, config.hidden_dim, config.n_layers, config.n_heads,
        config.n_kv_heads, config.head_dim, config.vocab_size, config.rope_theta,
        config.rope_layout == kernels::RopeLayout::kInterleaved ? "interleaved" : "half_split",
        config.rope_scaling, config.norm_eps, config.qkv_bias ? 1 : 0,
        kernels::DTypeName(config.kv_dtype));
    XXH3_128bits_update(st, desc.data(), desc.size());
    // Later additions, only when not at their default (so every fingerprint
    // made before them is unchanged).
    if (config.rope_freq_scale != 1.0f || !config.rope_freq_factors.empty() || config.qk_norm) {
      const std::string more = absl::StrFormat("rope_freq_scale=%.9g\nrope_freq_factors=%d\nqk_norm=%d\n",
                                               config.rope_freq_scale,
                                               config.rope_freq_factors.size(), config.qk_norm ? 1 : 0);
      XXH3_128bits_update(st, more.data(), more.size());
      HashFloats(st, config.rope_freq_factors);
    }
    if (config.rope_mscale != 1.0f) {
      const std::string m = absl::StrFormat("rope_mscale=%.9g\n", config.rope_mscale);
      XXH3_128bits_update(st, m.data(), m.size());
    }
    if (config.n_experts > 0) {  // the routing rule is named: another rule is another model
      const std::string m = absl::StrFormat("n_experts=%d\nn_experts_used=%d\nrouter=softmax_topk_norm\n",
                                            config.n_experts, config.n_experts_used);
      XXH3_128bits_update(st, m.data(), m.size());
    }
    const std::string gemma = internal::GemmaFingerprintText(config);  // "" unless gemma3
    XXH3_128bits_update(st, gemma.data(), gemma.size());
    HashMat(st, weights.tok_embeddings, weights.e_tok_embeddings);
    for (const LayerWeights& w : weights.layers) {
      HashFloats(st, w.attn_norm);
      HashMat(st, w.wq, w.e_wq);
      HashMat(st, w.wk, w.e_wk);
      HashMat(st, w.wv, w.e_wv);
      for (const auto* t : {&w.bq, &w.bk, &w.bv, &w.q_norm, &w.k_norm, &w.post_attn_norm,
                            &w.post_ffn_norm}) {
        HashFloats(st, *t);  // empty (nothing hashed) unless the model has them
      }
      HashMat(st, w.wo, w.e_wo);
      HashFloats(st, w.ffn_norm);
      HashMat(st, w.w_gate, w.e_gate);
      HashMat(st, w.w_up, w.e_up);
      HashMat(st, w.w_down, w.e_down);
      if (config.n_experts > 0) {
        HashMat(st, w.router, w.e_router);
        HashMat(st, w.x_gate, w.e_x_gate);
        HashMat(st, w.x_up, w.e_x_up);
        HashMat(st, w.x_down, w.e_x_down);
      }
    }
    HashFloats(st, weights.final_norm);
    if (config.shared_classifier) {
      HashMat(st, weights.tok_embeddings, weights.e_tok_embeddings);
    } else {
      HashMat(st, weights.classifier, weights.e_classifier);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, h);
    std::memcpy(m->fingerprint_.data(), canon.digest, 16);
  }

  // Fuse f32 q/k/v and gate/up so each is one GEMM (encoded weights stay
  // separate matrices in their file's encoding: BuildMats).
  m->wqkv_.resize(config.n_layers);
  m->bqkv_.resize(config.n_layers);
  m->wgate_up_.resize(config.n_layers);
  for (int l = 0; l < config.n_layers; ++l) {
    LayerWeights& w = weights.layers[l];
    if (config.qkv_bias) {
      std::vector<float>& b = m->bqkv_[l];
      b.insert(b.end(), w.bq.begin(), w.bq.end());
      b.insert(b.end(), w.bk.begin(), w.bk.end());
      b.insert(b.end(), w.bv.begin(), w.bv.end());
    }
    if (w.e_wq.empty() && w.e_wk.empty() && w.e_wv.empty()) {
      std::vector<float>& qkv = m->wqkv_[l];
      qkv.reserve((qd + 2 * kvd) * dim);
      qkv.insert(qkv.end(), w.wq.begin(), w.wq.end());
      qkv.insert(qkv.end(), w.wk.begin(), w.wk.end());
      qkv.insert(qkv.end(), w.wv.begin(), w.wv.end());
      for (auto* t : {&w.wq, &w.wk, &w.wv}) std::vector<float>().swap(*t);
    }
    if (config.n_experts == 0 && w.e_gate.empty() && w.e_up.empty()) {
      std::vector<float>& gu = m->wgate_up_[l];
      gu.reserve(2 * ffn * dim);
      gu.insert(gu.end(), w.w_gate.begin(), w.w_gate.end());
      gu.insert(gu.end(), w.w_up.begin(), w.w_up.end());
      for (auto* t : {&w.w_gate, &w.w_up}) std::vector<float>().swap(*t);
    }
    for (auto* t : {&w.bq, &w.bk, &w.bv}) std::vector<float>().swap(*t);
  }
  m->weights_ = std::move(weights);
  RETURN_IF_ERROR(m->BuildMats());
  return m;
}

absl::Status Model::BuildMats() {
  const ModelConfig& c = config_;
  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.hidden_dim;
  auto mat = [](const std::vector<float>& v, const kernels::WeightMatrix& e, int64_t rows,
                int64_t cols) { return e.empty() ? kernels::F32Matrix(v.data(), rows, cols) : e; };
  mats_.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    LayerMats& lm = mats_[l];
    if (!wqkv_[l].empty()) {
      lm.qkv = {{kernels::F32Matrix(wqkv_[l].data(), qd + 2 * kvd, dim), 0}};
    } else {
      lm.qkv = {{mat(w.wq, w.e_wq, qd, dim), 0},
                {mat(w.wk, w.e_wk, kvd, dim), qd},
                {mat(w.wv, w.e_wv, kvd, dim), qd + kvd}};
    }
    if (c.n_experts > 0) {
      const int64_t e = c.n_experts;
      lm.router = mat(w.router, w.e_router, e, dim);
      const kernels::WeightMatrix g = mat(w.x_gate, w.e_x_gate, e * ffn, dim),
                                  u = mat(w.x_up, w.e_x_up, e * ffn, dim),
                                  d = mat(w.x_down, w.e_x_down, e * dim, ffn);
      for (int64_t i = 0; i < e; ++i) {
        lm.x_gate.push_back(g.Rows(i * ffn, ffn));
        lm.x_up.push_back(u.Rows(i * ffn, ffn));
        lm.x_down.push_back(d.Rows(i * dim, dim));
      }
    } else if (!wgate_up_[l].empty()) {
      lm.gate_up = {{kernels::F32Matrix(wgate_up_[l].data(), 2 * ffn, dim), 0}};
    } else {
      lm.gate_up = {{mat(w.w_gate, w.e_gate, ffn, dim), 0}, {mat(w.w_up, w.e_up, ffn, dim), ffn}};
    }
    lm.wo = mat(w.wo, w.e_wo, dim, qd);
    if (c.n_experts == 0) lm.down = mat(w.w_down, w.e_down, dim, ffn);
  }
  emb_ = mat(weights_.tok_embeddings, weights_.e_tok_embeddings, c.vocab_size, dim);
  cls_ = c.shared_classifier ? emb_ : mat(weights_.classifier, weights_.e_classifier, c.vocab_size, dim);
  return absl::OkStatus();
}

absl::Status Model::ProjectParts(const std::vector<Part>& parts, TensorView x, int64_t col0,
                                 int64_t cols, float* out, int64_t ldo, float beta) {
  const int64_t n = x.shape[0];
  for (const Part& p : parts) {
    const int64_t a = std::max(col0, p.col0), b = std::min(col0 + cols, p.col0 + p.w.rows);
    if (a >= b) continue;
    RETURN_IF_ERROR(kernels::WeightGemm(x, p.w.Rows(a - p.col0, b - a),
                                        View2D(out + (a - col0), n, b - a, ldo), beta));
  }
  return absl::OkStatus();
}


absl::StatusOr<KVCache> Model::NewCache(int64_t capacity_tokens) const {
  return KVCache::Create(config_, capacity_tokens > 0 ? capacity_tokens : config_.max_seq_len);
}

absl::Status Model::Embed(absl::Span<const int32_t> tokens, TensorView hidden) const {
  RETURN_IF_ERROR(CheckMatrix(hidden, config_.dim, "Embed: hidden"));
  if (hidden.shape[0] != static_cast<int64_t>(tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat("Embed: hidden has ", hidden.shape[0],
                                                   " rows for ", tokens.size(), " tokens"));
  }

  for (size_t r = 0; r < tokens.size(); ++r) {
    const int32_t t = tokens[r];
    if (t < 0 || t >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", t, " at index ", r,
                                                     " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
    float* row = hidden.as<float>() + r * hidden.stride[0];
    RETURN_IF_ERROR(kernels::DequantizeRows(emb_, t, 1, row));
    if (config_.embed_scale != 1.0f) for (int j = 0; j < config_.dim; ++j) row[j] *= config_.embed_scale;
  }
  return absl::OkStatus();
}

// ComputeQKV: see model.h. One fused GEMM over [q | k | v] when every block
// of every row is wanted; otherwise a q GEMM over all rows and a k|v GEMM
// over the rows that need it (gathered when that is a subset).
absl::Status Model::ComputeQKV(int layer, TensorView hidden, const int32_t* positions,
                               int64_t rows, bool want_q, bool want_kv,
                               const uint8_t* kv_in_cache, Workspace* ws) const {
  const ModelConfig& c = config_;
  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), ld = qd + 2 * kvd;
  float* xb = ws->Get(ws->xb_, rows * dim);
  float* qkv = ws->Get(ws->qkv_, rows * ld);
  const LayerWeights& w = weights_.layers[layer];
  RETURN_IF_ERROR(kernels::RmsNorm(hidden, TensorView::Contiguous(w.attn_norm.data(), DType::kF32, {dim}),
                                   c.norm_eps, View2D(xb, rows, dim, dim)));
  const float* bias = c.qkv_bias ? bqkv_[layer].data() : nullptr;
  // Project(x [n, dim]) -> out [n, cols] (row stride ldo) from weight rows
  // [col0, col0 + cols), plus bias.
  auto project = [&](const float* x, int64_t n, int64_t col0, int64_t cols, float* out,
                     int64_t ldo) -> absl::Status {
    RETURN_IF_ERROR(ProjectParts(mats_[layer].qkv, View2D(x, n, dim, dim), col0, cols, out, ldo));
    if (bias != nullptr) {
      for (int64_t r = 0; r < n; ++r) {
        float* row = out + r * ldo;
        for (int64_t j = 0; j < cols; ++j) row[j] += bias[col0 + j];
      }
    }
    return absl::OkStatus();
  };
  const kernels::RopeParams rp = c.LayerRope(layer);
  // rope: (Qwen3) RMSNorm of every q (or k) head, then RoPE at `pos`. Heads
  // of a row are contiguous, so a row's heads are one [heads, head_dim] norm.
  auto rope = [&](float* base, int64_t n, int heads, int64_t ldr, const int32_t* pos,
                  bool is_q) -> absl::Status {
    if (c.qk_norm) {
      const std::vector<float>& nw = is_q ? w.q_norm : w.k_norm;
      const TensorView nv = TensorView::Contiguous(nw.data(), DType::kF32, {c.head_dim});
      for (int64_t r = 0; r < n; ++r) {
        const TensorView hv = View2D(base + r * ldr, heads, c.head_dim, c.head_dim);
        RETURN_IF_ERROR(kernels::RmsNorm(hv, nv, c.norm_eps, hv));
      }
    }
    return kernels::ApplyRope(View3D(base, n, heads, c.head_dim, ldr, c.head_dim), pos, rp);
  };

  // Rows whose K/V must be projected.
  int64_t n_kv = 0;
  if (want_kv) {
    if (kv_in_cache == nullptr) {
      n_kv = rows;
    } else {
      ws->kv_rows_.clear();
      for (int64_t r = 0; r < rows; ++r) {
        if (!kv_in_cache[r]) ws->kv_rows_.push_back(static_cast<int32_t>(r));
      }
      n_kv = static_cast<int64_t>(ws->kv_rows_.size());
    }
  }
  if (want_q && n_kv == rows) {
    RETURN_IF_ERROR(project(xb, rows, 0, ld, qkv, ld));
    RETURN_IF_ERROR(rope(qkv, rows, c.n_heads, ld, positions, true));
    return rope(qkv + qd, rows, c.n_kv_heads, ld, positions, false);
  }
  if (want_q) {
    RETURN_IF_ERROR(project(xb, rows, 0, qd, qkv, ld));
    RETURN_IF_ERROR(rope(qkv, rows, c.n_heads, ld, positions, true));
  }
  if (n_kv == rows) {
    RETURN_IF_ERROR(project(xb, rows, qd, 2 * kvd, qkv + qd, ld));
    return rope(qkv + qd, rows, c.n_kv_heads, ld, positions, false);
  }
  if (n_kv == 0) return absl::OkStatus();
  // A subset: gather its normalized rows, project, rotate, scatter back.
  float* gx = ws->Get(ws->gather_, n_kv * dim);
  float* gkv = ws->Get(ws->gather_kv_, n_kv * 2 * kvd);
  ws->positions_.resize(n_kv);
  for (int64_t i = 0; i < n_kv; ++i) {
    const int32_t r = ws->kv_rows_[i];
    std::memcpy(gx + i * dim, xb + r * dim, dim * sizeof(float));
    ws->positions_[i] = positions[r];
  }
  RETURN_IF_ERROR(project(gx, n_kv, qd, 2 * kvd, gkv, 2 * kvd));
  RETURN_IF_ERROR(rope(gkv, n_kv, c.n_kv_heads, 2 * kvd, ws->positions_.data(), false));
  for (int64_t i = 0; i < n_kv; ++i) {
    std::memcpy(qkv + ws->kv_rows_[i] * ld + qd, gkv + i * 2 * kvd, 2 * kvd * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status Model::ForwardLayer(int layer, TensorView hidden, const int32_t* positions,
                                 LayerKVView kv, const LayerOptions& options,
                                 Workspace* ws) const {
  const ModelConfig& c = config_;
  if (layer < 0 || layer >= c.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("ForwardLayer: layer ", layer,
                                                   " outside [0, ", c.n_layers, ")"));
  }
  if (ws == nullptr) return absl::InvalidArgumentError("ForwardLayer: null workspace");
  RETURN_IF_ERROR(CheckMatrix(hidden, c.dim, "ForwardLayer: hidden"));
  RETURN_IF_ERROR(CheckKV(kv.k, c.n_kv_heads, c.head_dim, "ForwardLayer: kv.k"));
  RETURN_IF_ERROR(CheckKV(kv.v, c.n_kv_heads, c.head_dim, "ForwardLayer: kv.v"));
  const int64_t rows = hidden.shape[0];
  const int64_t n_ctx = kv.k.shape[1];
  if (kv.v.shape[1] != n_ctx) return absl::InvalidArgumentError("ForwardLayer: K and V lengths differ");
  if (rows == 0) return absl::OkStatus();
  if (positions == nullptr) return absl::InvalidArgumentError("ForwardLayer: null positions");
  for (int64_t r = 0; r < rows; ++r) {
    if (positions[r] < 0 || positions[r] >= n_ctx) {
      return absl::InvalidArgumentError(absl::StrCat("ForwardLayer: position ", positions[r],
                                                     " of row ", r, " outside the KV [0, ",
                                                     n_ctx, ")"));
    }
  }
  for (const TensorView* f : {&options.fresh_k, &options.fresh_v}) {
    if (f->data == nullptr) continue;
    if (f->dtype != DType::kF32 || f->rank != 3 || f->shape[0] != c.n_kv_heads ||
        f->shape[1] != rows || f->shape[2] != c.head_dim || f->stride[2] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ForwardLayer: fresh K/V output must be f32 [", c.n_kv_heads, ", ", rows, ", ",
          c.head_dim, "], got ", f->DebugString()));
    }
  }
  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), ld = qd + 2 * kvd,
                hd = c.head_dim, ffn = c.hidden_dim;
  RETURN_IF_ERROR(ComputeQKV(layer, hidden, positions, rows, /*want_q=*/true, /*want_kv=*/true,
                             options.kv_in_cache, ws));
  const float* qkv = ws->qkv_.data();

  // Scatter the rows' fresh K/V into the cache (and the optional outputs);
  // rows flagged kv_in_cache keep the cache's values.
  float* kc = kv.k.as<float>();
  float* vc = kv.v.as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const bool cached = options.kv_in_cache != nullptr && options.kv_in_cache[r];
    for (int h = 0; h < c.n_kv_heads; ++h) {
      float* kdst = kc + h * kv.k.stride[0] + positions[r] * kv.k.stride[1];
      float* vdst = vc + h * kv.v.stride[0] + positions[r] * kv.v.stride[1];
      const float* kr = cached ? kdst : qkv + r * ld + qd + h * hd;
      const float* vr = cached ? vdst : qkv + r * ld + qd + kvd + h * hd;
      if (!cached) {
        std::memcpy(kdst, kr, hd * 4);
        std::memcpy(vdst, vr, hd * 4);
      }
      if (options.fresh_k.data != nullptr) {
        std::memcpy(options.fresh_k.as<float>() + h * options.fresh_k.stride[0] +
                        r * options.fresh_k.stride[1],
                    kr, hd * 4);
      }
      if (options.fresh_v.data != nullptr) {
        std::memcpy(options.fresh_v.as<float>() + h * options.fresh_v.stride[0] +
                        r * options.fresh_v.stride[1],
                    vr, hd * 4);
      }
    }
  }

  // Attention and output projection (accumulated into the residual).
  float* att = ws->Get(ws->att_, rows * qd);
  kernels::AttentionParams ap;
  ap.num_heads = c.n_heads;
  ap.num_kv_heads = c.n_kv_heads;
  ap.head_dim = c.head_dim;
  ap.causal = options.causal;
  ap.scale = c.attn_scale;
  ap.window = c.Window(layer);
  RETURN_IF_ERROR(kernels::SelectiveAttention(View3D(qkv, rows, c.n_heads, hd, ld, hd), positions,
                                              kv.k, kv.v, View3D(att, rows, c.n_heads, hd, qd, hd),
                                              ap));
  if (c.post_norms) return GemmaTail(layer, att, hidden, ws);  // model/gemma_block.cc
  const LayerWeights& w = weights_.layers[layer];
  RETURN_IF_ERROR(kernels::WeightGemm(View2D(att, rows, qd, qd), mats_[layer].wo, hidden, 1.0f));

  // SwiGLU MLP (accumulated into the residual).
  float* xb = ws->Get(ws->xb_, rows * dim);
  RETURN_IF_ERROR(kernels::RmsNorm(hidden, TensorView::Contiguous(w.ffn_norm.data(), DType::kF32, {dim}),
                                   c.norm_eps, View2D(xb, rows, dim, dim)));
  if (c.n_experts > 0) return MoeFfn(layer, xb, hidden, options.router_probs, ws);
  float* gu = ws->Get(ws->ffn_, rows * 2 * ffn);
  RETURN_IF_ERROR(ProjectParts(mats_[layer].gate_up, View2D(xb, rows, dim, dim), 0, 2 * ffn, gu,
                               2 * ffn));
  const TensorView gate = View2D(gu, rows, ffn, 2 * ffn);
  RETURN_IF_ERROR(kernels::SwiGlu(gate, View2D(gu + ffn, rows, ffn, 2 * ffn), gate));
  RETURN_IF_ERROR(kernels::WeightGemm(gate, mats_[layer].down, hidden, 1.0f));
  return absl::OkStatus();
}

absl::Status Model::ProjectQ(int layer, TensorView hidden, const int32_t* positions,
                             TensorView q_out, Workspace* ws) const {
  const ModelConfig& c = config_;
  if (layer < 0 || layer >= c.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("ProjectQ: layer ", layer, " out of range"));
  }
  if (ws == nullptr || positions == nullptr) {
    return absl::InvalidArgumentError("ProjectQ: null workspace or positions");
  }
  RETURN_IF_ERROR(CheckMatrix(hidden, c.dim, "ProjectQ: hidden"));
  RETURN_IF_ERROR(CheckMatrix(q_out, c.q_dim(), "ProjectQ: q_out"));
  const int64_t rows = hidden.shape[0];
  if (q_out.shape[0] != rows) return absl::InvalidArgumentError("ProjectQ: one query per row");
  if (rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(ComputeQKV(layer, hidden, positions, rows, /*want_q=*/true, /*want_kv=*/false,
                             /*kv_in_cache=*/nullptr, ws));
  const int64_t qd = c.q_dim(), ld = qd + 2 * c.kv_dim();
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(q_out.as<float>() + r * q_out.stride[0], ws->qkv_.data() + r * ld, qd * 4);
  }
  return absl::OkStatus();
}

absl::Status Model::ProjectKV(int layer, TensorView hidden, const int32_t* positions,
                              TensorView k_out, TensorView v_out, Workspace* ws) const {
  const ModelConfig& c = config_;
  if (layer < 0 || layer >= c.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("ProjectKV: layer ", layer, " out of range"));
  }
  if (ws == nullptr || positions == nullptr) {
    return absl::InvalidArgumentError("ProjectKV: null workspace or positions");
  }
  RETURN_IF_ERROR(CheckMatrix(hidden, c.dim, "ProjectKV: hidden"));
  const int64_t rows = hidden.shape[0];
  RETURN_IF_ERROR(CheckKV(k_out, c.n_kv_heads, c.head_dim, "ProjectKV: k_out"));
  RETURN_IF_ERROR(CheckKV(v_out, c.n_kv_heads, c.head_dim, "ProjectKV: v_out"));
  if (k_out.shape[1] != rows || v_out.shape[1] != rows) {
    return absl::InvalidArgumentError("ProjectKV: outputs must have one token per row");
  }
  if (rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(ComputeQKV(layer, hidden, positions, rows, /*want_q=*/false, /*want_kv=*/true,
                             /*kv_in_cache=*/nullptr, ws));
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), ld = qd + 2 * kvd, hd = c.head_dim;
  const float* qkv = ws->qkv_.data();
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < c.n_kv_heads; ++h) {
      std::memcpy(k_out.as<float>() + h * k_out.stride[0] + r * k_out.stride[1],
                  qkv + r * ld + qd + h * hd, hd * 4);
      std::memcpy(v_out.as<float>() + h * v_out.stride[0] + r * v_out.stride[1],
                  qkv + r * ld + qd + kvd + h * hd, hd * 4);
    }
  }
  return absl::OkStatus();
}

absl::Status Model::FinalNormAndLogits(TensorView hidden, TensorView logits, Workspace* ws) const {
  const ModelConfig& c = config_;
  if (ws == nullptr) return absl::InvalidArgumentError("FinalNormAndLogits: null workspace");
  RETURN_IF_ERROR(CheckMatrix(hidden, c.dim, "FinalNormAndLogits: hidden"));
  RETURN_IF_ERROR(CheckMatrix(logits, c.vocab_size, "FinalNormAndLogits: logits"));
  const int64_t rows = hidden.shape[0], dim = c.dim;
  if (logits.shape[0] != rows) {
    return absl::InvalidArgumentError("FinalNormAndLogits: logits rows != hidden rows");
  }
  if (rows == 0) return absl::OkStatus();
  float* xb = ws->Get(ws->logits_norm_, rows * dim);
  RETURN_IF_ERROR(kernels::RmsNorm(
      hidden, TensorView::Contiguous(weights_.final_norm.data(), DType::kF32, {dim}), c.norm_eps,
      View2D(xb, rows, dim, dim)));
  RETURN_IF_ERROR(kernels::WeightGemm(View2D(xb, rows, dim, dim), cls_, logits));
  return internal::Softcap(c.final_softcap, logits);  // no-op at 0
}

absl::Status Model::Prefill(absl::Span<const int32_t> tokens, KVCache* cache, Workspace* ws,
                            LogitsMode mode, float* logits) const {
  const ModelConfig& c = config_;
  if (cache == nullptr || ws == nullptr) {
    return absl::InvalidArgumentError("Prefill: null cache or workspace");
  }
  if (tokens.empty()) return absl::InvalidArgumentError("Prefill: no tokens");
  if (mode != LogitsMode::kNone && logits == nullptr) {
    return absl::InvalidArgumentError("Prefill: null logits buffer");
  }
  if (cache->n_layers() != c.n_layers || cache->kv_heads() != c.n_kv_heads ||
      cache->head_dim() != c.head_dim) {
    return absl::InvalidArgumentError("Prefill: the KV cache was made for another model shape");
  }
  const int64_t t = static_cast<int64_t>(tokens.size());
  const int64_t p = cache->num_tokens();
  if (p + t > c.max_seq_len) {
    return absl::OutOfRangeError(absl::StrFormat(
        "prompt of %d tokens (after %d cached) exceeds the model context of %d tokens", t, p,
        c.max_seq_len));
  }
  if (p + t > cache->capacity_tokens()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "prompt of %d tokens (after %d cached) exceeds the KV cache capacity of %d tokens", t, p,
        cache->capacity_tokens()));
  }
  const int64_t dim = c.dim;
  float* hidden = ws->Get(ws->hidden_, t * dim);
  if (ws->positions_.size() < size_t(t)) ws->positions_.resize(t);
  int32_t* pos = ws->positions_.data();
  for (int64_t i = 0; i < t; ++i) pos[i] = static_cast<int32_t>(p + i);
  const TensorView hv = View2D(hidden, t, dim, dim);
  RETURN_IF_ERROR(Embed(tokens, hv));
  for (int l = 0; l < c.n_layers; ++l) {
    RETURN_IF_ERROR(ForwardLayer(l, hv, pos, cache->Layer(l, p + t), LayerOptions(), ws));
  }
  if (mode == LogitsMode::kLast) {
    RETURN_IF_ERROR(FinalNormAndLogits(View2D(hidden + (t - 1) * dim, 1, dim, dim),
                                       View2D(logits, 1, c.vocab_size, c.vocab_size), ws));
  } else if (mode == LogitsMode::kAll) {
    RETURN_IF_ERROR(FinalNormAndLogits(hv, View2D(logits, t, c.vocab_size, c.vocab_size), ws));
  }
  return cache->set_num_tokens(p + t);
}

double Model::MatmulFlops(int64_t tokens) const {
  const ModelConfig& c = config_;
  // A MoE block: the router and the k experts each token runs.
  const double ffn = c.n_experts > 0
                         ? 3.0 * c.dim * c.hidden_dim * c.n_experts_used + double(c.dim) * c.n_experts
                         : 3.0 * c.dim * c.hidden_dim;
  const double per_layer = double(c.dim) * (c.q_dim() + 2.0 * c.kv_dim()) +
                           double(c.q_dim()) * c.dim + ffn;
  return 2.0 * double(tokens) * c.n_layers * per_layer;
}

double Model::AttentionFlops(int64_t tokens) const {
  const ModelConfig& c = config_;
  double visible = 0;  // causal (key, query) pairs over layers; a window caps a query's keys
  for (int l = 0; l < c.n_layers; ++l) visible += internal::VisiblePairs(tokens, c.Window(l));
  return 4.0 * c.n_heads * double(c.head_dim) * visible;
}

}  // namespace ragkv::model
