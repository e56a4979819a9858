// GGUF v2/v3 reader (llama architecture, F32/F16/BF16 tensors) and its
// embedded SentencePiece-style vocabulary.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "kernels/ggml_quant.h"
#include "kernels/weight_gemm.h"
#include "model/internal/gguf_file.h"
#include "model/internal/gguf_gemma3.h"
#include "model/internal/gguf_moe.h"
#include "model/internal/loaders.h"
#include "model/internal/rope_scaling.h"
#include "model/special_tokens.h"

namespace ragkv::model::internal {
namespace {

// ViewGgufTensor: a 2-D tensor {cols, rows} kept in the file's encoding:
// a WeightMatrix over the mapping, bounds-checked. Errors as ReadGgufTensor.
absl::Status ViewGgufTensor(const MappedFile& f, const std::string& path, const std::string& name,
                            const TensorInfo& t, uint64_t data_offset, kernels::WeightMatrix* out) {
  absl::StatusOr<kernels::GgmlTypeInfo> info = kernels::GgmlTypeOf(t.type);
  if (!info.ok()) {
    return absl::Status(info.status().code(),
                        absl::StrCat(path, ": tensor ", name, ": ", info.status().message()));
  }
  absl::StatusOr<uint64_t> row_bytes = kernels::GgmlRowBytes(*info, t.dims[0]);
  if (!row_bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor ", name, ": ", row_bytes.status().message()));
  }
  const uint64_t bytes = static_cast<uint64_t>(t.dims[1]) * *row_bytes, begin = data_offset + t.offset;
  if (begin > f.size() || bytes > f.size() - begin) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated: tensor ", name, " (",
                                                   info->name, ", ", bytes,
                                                   " bytes) runs past the end of the file"));
  }
  ASSIGN_OR_RETURN(*out, kernels::MakeWeightMatrix(info->type, f.data() + begin, t.dims[1], t.dims[0]));
  return absl::OkStatus();
}

// ReadGgufTensor: tensor `name` (info `t`, data at data_offset + t.offset)
// as f32. F32/F16/BF16 convert; the block-quantized types are viewed as
// rows of dims[0] (ViewGgufTensor's checks) and dequantized exactly as ggml
// does.
absl::Status ReadGgufTensor(const MappedFile& f, const std::string& path, const std::string& name,
                            const TensorInfo& t, uint64_t data_offset, std::vector<float>* out) {
  absl::StatusOr<kernels::GgmlTypeInfo> info = kernels::GgmlTypeOf(t.type);
  if (!info.ok()) {
    return absl::Status(info.status().code(),
                        absl::StrCat(path, ": tensor ", name, ": ", info.status().message()));
  }
  uint64_t n = 1;
  for (int64_t d : t.dims) n *= static_cast<uint64_t>(d);
  if (!info->quantized) {
    const kernels::DType dt = t.type == 0   ? kernels::DType::kF32
                              : t.type == 1 ? kernels::DType::kF16
                                            : kernels::DType::kBF16;
    if (t.offset > f.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated: tensor ", name, " offset past the end"));
    }
    return ReadTensorF32(f, data_offset + t.offset, dt, n, name, out);
  }
  TensorInfo rows = t;
  rows.dims = {t.dims[0], static_cast<int64_t>(n / static_cast<uint64_t>(t.dims[0]))};
  kernels::WeightMatrix w;
  RETURN_IF_ERROR(ViewGgufTensor(f, path, name, rows, data_offset, &w));
  out->resize(n);
  return kernels::DequantizeRows(w, 0, w.rows, out->data());
}

// RefuseUnusedTensors: a tensor this runtime did not read changes the math
// of the engine that does (as Llama-3's rope_freqs.weight did before it was
// read: ignored, it loaded fine and computed wrong logits). Refuse the file
// by the tensor's name instead. Unimplemented, naming up to 4 tensors.
absl::Status RefuseUnusedTensors(const std::string& path, const Gguf& g,
                                 const std::set<std::string>& consumed) {
  std::vector<std::string> unused;
  for (const auto& [name, info] : g.tensors) {
    if (consumed.count(name) == 0) unused.push_back(name);
  }
  if (unused.empty()) return absl::OkStatus();
  std::sort(unused.begin(), unused.end());
  const size_t total = unused.size();
  if (unused.size() > 4) unused.resize(4);
  return absl::UnimplementedError(absl::StrCat(
      path, ": ", total, " tensor(s) this runtime does not use, refused rather than ignored: ",
      absl::StrJoin(unused, ", "), total > 4 ? ", ..." : ""));
}

// GgufArch: what a GGUF architecture means for the block (docs/model.md):
// llama = llama.cpp's NORM RoPE over the converter's permuted q/k rows
// (interleaved pairs); qwen2 / qwen3 = NEOX RoPE (half-split pairs) on
// unpermuted rows; qwen2 has q/k/v biases, qwen3 per-head q/k RMSNorm;
// phi3 = NEOX, Llama's block with fused attn_qkv / ffn_up tensors
// (LoadGgufLayer) and a sliding-window key (Phi3Window); qwen3moe = qwen3's
// attention with a mixture-of-experts FFN (gguf_moe.h; llama with
// llama.expert_count is Mixtral).
struct GgufArch {
  const char* name;
  kernels::RopeLayout rope;
  bool qk_norm;
};
constexpr GgufArch kGgufArchs[] = {
    {"llama", kernels::RopeLayout::kInterleaved, false},
    {"qwen2", kernels::RopeLayout::kHalfSplit, false},
    {"qwen3", kernels::RopeLayout::kHalfSplit, true},
    {"phi3", kernels::RopeLayout::kHalfSplit, false},
    {"qwen3moe", kernels::RopeLayout::kHalfSplit, true},
    {"gemma3", kernels::RopeLayout::kHalfSplit, true},  // + gguf_gemma3.h
};

// GgufRopeFactor: the scaling factor as the pinned llama.cpp reads it:
// rope.scaling.factor when the key is there (even at 0), else the older
// rope.scale_linear; absent or 0 = 1.
absl::StatusOr<double> GgufRopeFactor(const Gguf& g, const std::string& path,
                                      const std::string& arch) {
  const std::string key = arch + ".rope.scaling.factor";
  double factor = g.kv.contains(key) ? GetNumberOr(g, key, 0.0)
                                     : GetNumberOr(g, arch + ".rope.scale_linear", 0.0);
  if (factor == 0) factor = 1;
  if (!(factor > 0) || !std::isfinite(factor)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": rope scaling factor ", factor));
  }
  return factor;
}

// CheckYarnKeys: the rope.scaling.yarn_* keys the pinned llama.cpp ignores
// for llama / qwen2 / qwen3 (it runs YaRN with ext_factor 1, beta_fast 32,
// beta_slow 1, no log multiplier). A value other than that default would
// mean the file asks for math no engine here runs: refused by name.
absl::Status CheckYarnKeys(const Gguf& g, const std::string& path, const std::string& arch,
                           bool yarn) {
  struct Key {
    const char* name;
    double want, also;
  };
  const Key keys[] = {{"yarn_ext_factor", yarn ? 1.0 : 0.0, -1.0},
                      {"yarn_attn_factor", 1.0, 1.0},
                      {"yarn_beta_fast", 32.0, 32.0},
                      {"yarn_beta_slow", 1.0, 1.0},
                      {"yarn_log_multiplier", 0.0, 0.0}};
  for (const Key& k : keys) {
    const std::string key = arch + ".rope.scaling." + k.name;
    if (!g.kv.count(key)) continue;
    const double v = GetNumberOr(g, key, k.want);
    if (v != k.want && v != k.also) {
      return absl::UnimplementedError(absl::StrCat(path, ": ", key, " = ", v,
                                                   " is not supported (llama.cpp runs ", k.want,
                                                   " for ", arch, ")"));
    }
  }
  return absl::OkStatus();
}

// ReadGgufScaling: the RoPE scaling metadata (<arch>.rope.scaling.*) into
// c, as the pinned llama.cpp reads it: type absent = "linear" (factor 1 =
// none); "linear" sets rope_freq_scale = 1/factor; "yarn" per-pair factors
// and mscale (model/internal/rope_scaling.h); rope.scaling.attn_factor
// scales the rotation of every kind. Any other type is refused by name
// (longrope, ...). rope_freqs.weight is read later.
absl::Status ReadGgufScaling(const Gguf& g, const std::string& path, const std::string& arch,
                             ModelConfig* c) {
  const std::string scaling = GetStringOr(g, arch + ".rope.scaling.type", "linear");
  if (scaling != "none" && scaling != "linear" && scaling != "yarn") {
    return absl::UnimplementedError(absl::StrCat(
        path, ": RoPE scaling '", scaling, "' is not supported (none, linear, yarn, rope_freqs are)"));
  }
  RETURN_IF_ERROR(CheckYarnKeys(g, path, arch, scaling == "yarn"));
  const double attn = GetNumberOr(g, arch + ".rope.scaling.attn_factor", 1.0);
  if (!(attn > 0) || !std::isfinite(attn)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", arch, ".rope.scaling.attn_factor ", attn));
  }
  c->rope_mscale = static_cast<float>(attn);
  ASSIGN_OR_RETURN(const double factor, GgufRopeFactor(g, path, arch));
  if (scaling == "linear" && factor != 1.0) {
    c->rope_scaling = "linear";
    c->rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling == "yarn") {
    if (factor < 1.0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": YaRN factor ", factor, " < 1"));
    }
    YarnParams yp;
    yp.factor = factor;
    // Absent or 0: the training context, as llama.cpp's n_ctx_orig_yarn.
    yp.original = GetNumberOr(g, arch + ".rope.scaling.original_context_length", 0);
    if (yp.original == 0) yp.original = GetNumberOr(g, arch + ".context_length", 0);
    if (!(yp.original >= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": YaRN needs an original context length"));
    }
    const int hd = c->head_dim ? c->head_dim : (c->n_heads > 0 ? c->dim / c->n_heads : 0);
    if (hd <= 0 || hd % 2) return absl::InvalidArgumentError(path + ": bad head_dim for YaRN");
    c->rope_scaling = "yarn";
    c->rope_freq_factors = YarnRopeFactors(c->rope_theta, hd, yp);
    c->rope_mscale = static_cast<float>(attn * YarnMscale(factor));
  }
  return absl::OkStatus();
}

// Phi3Window: phi3.attention.sliding_window. The pinned llama.cpp disables
// Phi-3's sliding window (full attention at every length); ragkv computes
// the same full attention, which equals the window attention the model was
// trained with only while every key is inside the window. So a window
// w > 0 caps the context at w tokens, and a requested context above w
// (LoadOptions::max_seq_len) is refused by name. docs/model.md, Phi-3.
absl::Status Phi3Window(const Gguf& g, const std::string& path, const LoadOptions& options,
                        ModelConfig* c) {
  const double w = GetNumberOr(g, "phi3.attention.sliding_window", 0);
  if (!(w >= 0) || w > (1 << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": phi3.attention.sliding_window ", w));
  }
  if (w == 0) return absl::OkStatus();
  if (options.max_seq_len > w) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s: context %d is longer than phi3.attention.sliding_window %d: sliding-window attention "
        "is not implemented (contexts up to the window are)",
        path, options.max_seq_len, static_cast<int>(w)));
  }
  c->max_seq_len = std::min(c->max_seq_len, static_cast<int>(w));
  return absl::OkStatus();
}

// ReadGgufConfig: the model config of a parsed GGUF (architecture, shape,
// norms, RoPE), validated. Unimplemented for an architecture, RoPE scaling
// RecurrentNote: for an architecture with per-sequence recurrent state
// (llama.cpp's llm_arch_is_recurrent / llm_arch_is_hybrid), why ragkv will
// never blend it; "" otherwise.
std::string RecurrentNote(const std::string& arch) {
  static const char* const kRecurrent[] = {
      "mamba",      "mamba2",         "rwkv6",     "rwkv6qwen2",  "rwkv7",       "arwkv7",
      "jamba",      "falcon-h1",      "plamo2",    "granitehybrid", "lfm2",      "lfm2moe",
      "nemotron_h", "nemotron_h_moe", "qwen3next", "qwen35",      "qwen35moe",   "qwen4exp",
      "kimi-linear", "kimi-k3",       "bailingmoe3", "deepseek4", "minimax-01"};
  for (const char* r : kRecurrent) {
    if (arch == r) {
      return "; its per-sequence recurrent state is not chunk-composable, so ragkv never blends "
             "it (`ragkv serve --engine llama.cpp` serves it with llama.cpp's full prefill)";
    }
  }
  return "";
}

// or partial rotary ragkv does not run; InvalidArgument for bad metadata.
absl::StatusOr<ModelConfig> ReadGgufConfig(const Gguf& g, const std::string& path,
                                           const LoadOptions& options) {
  const std::string arch = GetStringOr(g, "general.architecture", "");
  const GgufArch* a = nullptr;
  for (const GgufArch& x : kGgufArchs) a = arch == x.name ? &x : a;
  if (a == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": GGUF architecture '", arch,
        "' is not supported (llama, qwen2, qwen3, phi3, qwen3moe, gemma3 are)", RecurrentNote(arch)));
  }
  ModelConfig c;
  c.arch = arch;
  c.rope_layout = a->rope;
  c.qk_norm = a->qk_norm;
  c.kv_dtype = options.kv_dtype;
  auto geti = [&](const std::string& key, int* out) -> absl::Status {
    ASSIGN_OR_RETURN(double x, GetNumber(g, path, arch + "." + key));
    if (x < 0 || x > (1 << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", arch, ".", key, " = ", x, " is out of range"));
    }
    *out = static_cast<int>(x);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(geti("embedding_length", &c.dim));
  // qwen3moe may carry only expert_feed_forward_length (ReadGgufMoe).
  if (arch != "qwen3moe" || g.kv.count(arch + ".feed_forward_length")) {
    RETURN_IF_ERROR(geti("feed_forward_length", &c.hidden_dim));
  }
  RETURN_IF_ERROR(geti("block_count", &c.n_layers));
  RETURN_IF_ERROR(geti("attention.head_count", &c.n_heads));
  c.n_kv_heads = c.n_heads;
  if (g.kv.count(arch + ".attention.head_count_kv")) {
    RETURN_IF_ERROR(geti("attention.head_count_kv", &c.n_kv_heads));
  }
  RETURN_IF_ERROR(geti("context_length", &c.max_seq_len));
  if (g.kv.count(arch + ".attention.key_length")) RETURN_IF_ERROR(geti("attention.key_length", &c.head_dim));
  if (g.kv.count(arch + ".attention.value_length")) {
    int vlen = 0;
    RETURN_IF_ERROR(geti("attention.value_length", &vlen));
    if (vlen != (c.head_dim ? c.head_dim : (c.n_heads ? c.dim / c.n_heads : 0))) {
      return absl::UnimplementedError(absl::StrCat(path, ": attention.value_length ", vlen,
                                                   " != key_length is not supported"));
    }
  }
  c.norm_eps = static_cast<float>(GetNumberOr(g, arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(GetNumberOr(g, arch + ".rope.freq_base", 10000.0));
  RETURN_IF_ERROR(ReadGgufScaling(g, path, arch, &c));
  if (arch == "llama" || arch == "qwen3moe") RETURN_IF_ERROR(ReadGgufMoe(g, path, arch, &c));
  if (arch == "gemma3") RETURN_IF_ERROR(ReadGgufGemma3(g, path, &c));
  auto emb = g.tensors.find("token_embd.weight");
  if (emb == g.tensors.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing tensor token_embd.weight"));
  }
  if (emb->second.dims.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": token_embd.weight is not 2-D"));
  }
  c.vocab_size = static_cast<int>(emb->second.dims[1]);
  c.shared_classifier = g.tensors.count("output.weight") == 0;
  c.qkv_bias = g.tensors.count("blk.0.attn_q.bias") > 0;
  absl::Status v = c.Validate();
  if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", v.message()));
  const int rope_dims = static_cast<int>(GetNumberOr(g, arch + ".rope.dimension_count", c.head_dim));
  if (rope_dims != c.head_dim) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s: partial rotary embedding (rope.dimension_count %d != head_dim %d) is not supported "
        "(ragkv runs full rotary only)",
        path, rope_dims, c.head_dim));
  }
  if (arch == "phi3") RETURN_IF_ERROR(Phi3Window(g, path, options, &c));
  if (options.max_seq_len > 0) c.max_seq_len = options.max_seq_len;
  return c;
}

// GgufReader: reads named tensors of one file, checking ggml dims {in, out}
// (or {n}), and remembers which were read (RefuseUnusedTensors).
struct GgufReader {
  const MappedFile& f;
  const Gguf& g;
  const std::string& path;
  std::set<std::string> consumed;

  absl::Status Load(const std::string& name, std::vector<int64_t> want, std::vector<float>* out) {
    ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, want));
    return ReadGgufTensor(f, path, name, *t, g.data_offset, out);
  }
  // Matrix: a {in, out} weight, kept encoded (a view of the mapping) when
  // `keep_encoding`, else widened to f32 into `f32`.
  absl::Status Matrix(const std::string& name, int64_t in, int64_t out, std::vector<float>* f32,
                      kernels::WeightMatrix* view) {
    if (!keep_encoding) return Load(name, {in, out}, f32);
    ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {in, out}));
    return ViewGgufTensor(f, path, name, *t, g.data_offset, view);
  }
  // Fused: a {in, sum(parts)} weight whose rows are the parts stacked in
  // order (Phi-3's attn_qkv = [q | k | v], ffn_up = [gate | up]), split
  // into one matrix per part: row-range views of the file's encoding (a
  // quantized block never spans rows, so every row range is whole blocks),
  // or f32 copies when the encoding is not kept.
  absl::Status Fused(const std::string& name, int64_t in, const std::vector<int64_t>& parts,
                     const std::vector<std::vector<float>*>& f32,
                     const std::vector<kernels::WeightMatrix*>& views) {
    int64_t out = 0;
    for (int64_t n : parts) out += n;
    kernels::WeightMatrix whole;
    std::vector<float> all;
    RETURN_IF_ERROR(Matrix(name, in, out, &all, &whole));
    int64_t r0 = 0;
    for (size_t i = 0; i < parts.size(); r0 += parts[i++]) {
      if (keep_encoding) {
        *views[i] = whole.Rows(r0, parts[i]);
      } else {
        f32[i]->assign(all.begin() + r0 * in, all.begin() + (r0 + parts[i]) * in);
      }
    }
    return absl::OkStatus();
  }
  // Stacked: a 3-D {in, out, n} weight (n matrices of {in, out}, as a
  // GGUF's ffn_*_exps), kept or widened as one [n * out, in] matrix whose
  // rows [i*out, (i+1)*out) are matrix i.
  absl::Status Stacked(const std::string& name, int64_t in, int64_t out, int64_t n,
                       std::vector<float>* f32, kernels::WeightMatrix* view) {
    ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {in, out, n}));
    if (!keep_encoding) return ReadGgufTensor(f, path, name, *t, g.data_offset, f32);
    TensorInfo rows = *t;
    rows.dims = {in, out * n};
    return ViewGgufTensor(f, path, name, rows, g.data_offset, view);
  }
  absl::StatusOr<const TensorInfo*> Find(const std::string& name, const std::vector<int64_t>& want) {
    consumed.insert(name);
    auto it = g.tensors.find(name);
    if (it == g.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": missing tensor ", name));
    }
    RETURN_IF_ERROR(CheckShape(path, name, it->second.dims, want));
    return &it->second;
  }
  bool keep_encoding = true;
};

// LoadGgufLayer: block l's tensors.
absl::Status LoadGgufLayer(GgufReader& r, const ModelConfig& c, int l, LayerWeights* lw) {
  const int64_t dim = c.dim, ffn = c.hidden_dim, qd = c.q_dim(), kvd = c.kv_dim();
  const std::string p = absl::StrCat("blk.", l, ".");
  RETURN_IF_ERROR(r.Load(p + "attn_norm.weight", {dim}, &lw->attn_norm));
  if (c.arch == "phi3") {  // fused [q | k | v] rows, as llama.cpp's converter writes Phi-3
    RETURN_IF_ERROR(r.Fused(p + "attn_qkv.weight", dim, {qd, kvd, kvd},
                            {&lw->wq, &lw->wk, &lw->wv}, {&lw->e_wq, &lw->e_wk, &lw->e_wv}));
  } else {
    RETURN_IF_ERROR(r.Matrix(p + "attn_q.weight", dim, qd, &lw->wq, &lw->e_wq));
    RETURN_IF_ERROR(r.Matrix(p + "attn_k.weight", dim, kvd, &lw->wk, &lw->e_wk));
    RETURN_IF_ERROR(r.Matrix(p + "attn_v.weight", dim, kvd, &lw->wv, &lw->e_wv));
  }
  if (c.qkv_bias) {
    RETURN_IF_ERROR(r.Load(p + "attn_q.bias", {qd}, &lw->bq));
    RETURN_IF_ERROR(r.Load(p + "attn_k.bias", {kvd}, &lw->bk));
    RETURN_IF_ERROR(r.Load(p + "attn_v.bias", {kvd}, &lw->bv));
  }
  if (c.qk_norm) {
    RETURN_IF_ERROR(r.Load(p + "attn_q_norm.weight", {c.head_dim}, &lw->q_norm));
    RETURN_IF_ERROR(r.Load(p + "attn_k_norm.weight", {c.head_dim}, &lw->k_norm));
  }
  RETURN_IF_ERROR(r.Matrix(p + "attn_output.weight", qd, dim, &lw->wo, &lw->e_wo));
  RETURN_IF_ERROR(r.Load(p + "ffn_norm.weight", {dim}, &lw->ffn_norm));
  if (c.post_norms) {  // gemma3
    RETURN_IF_ERROR(r.Load(p + "post_attention_norm.weight", {dim}, &lw->post_attn_norm));
    RETURN_IF_ERROR(r.Load(p + "post_ffw_norm.weight", {dim}, &lw->post_ffn_norm));
  }
  if (c.n_experts > 0) {  // router and experts (gguf_moe.h)
    const int64_t e = c.n_experts;
    RETURN_IF_ERROR(r.Matrix(p + "ffn_gate_inp.weight", dim, e, &lw->router, &lw->e_router));
    RETURN_IF_ERROR(r.Stacked(p + "ffn_gate_exps.weight", dim, ffn, e, &lw->x_gate, &lw->e_x_gate));
    RETURN_IF_ERROR(r.Stacked(p + "ffn_up_exps.weight", dim, ffn, e, &lw->x_up, &lw->e_x_up));
    return r.Stacked(p + "ffn_down_exps.weight", ffn, dim, e, &lw->x_down, &lw->e_x_down);
  }
  if (c.arch == "phi3") {  // fused [gate | up] rows: ggml_swiglu's silu half comes first
    RETURN_IF_ERROR(r.Fused(p + "ffn_up.weight", dim, {ffn, ffn}, {&lw->w_gate, &lw->w_up},
                            {&lw->e_gate, &lw->e_up}));
  } else {
    RETURN_IF_ERROR(r.Matrix(p + "ffn_gate.weight", dim, ffn, &lw->w_gate, &lw->e_gate));
    RETURN_IF_ERROR(r.Matrix(p + "ffn_up.weight", dim, ffn, &lw->w_up, &lw->e_up));
  }
  return r.Matrix(p + "ffn_down.weight", ffn, dim, &lw->w_down, &lw->e_down);
}

}  // namespace

absl::StatusOr<ModelParts> LoadGguf(const std::string& path, const LoadOptions& options) {
  ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  auto file = std::make_shared<MappedFile>(std::move(mapped));
  const MappedFile& f = *file;
  ASSIGN_OR_RETURN(Gguf g, ParseGguf(f));
  ModelParts parts;
  parts.format = ModelFormat::kGguf;
  ASSIGN_OR_RETURN(parts.config, ReadGgufConfig(g, path, options));
  ModelConfig& c = parts.config;
  GgufReader r{f, g, path, {}};
  r.keep_encoding = options.keep_encoding;
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (g.tensors.count(name)) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": tensor ", name, ": LongRoPE (the long/short RoPE factors of the 128k Phi-3 "
          "variants) is not supported"));
    }
  }
  if (g.tensors.count("rope_freqs.weight")) {
    // Llama-3.1/3.2 long-context RoPE: per-pair frequency divisors.
    RETURN_IF_ERROR(r.Load("rope_freqs.weight", {c.head_dim / 2}, &c.rope_freq_factors));
    if (c.rope_scaling != "none") {
      return absl::UnimplementedError(absl::StrCat(path, ": rope_freqs.weight with RoPE scaling '",
                                                   c.rope_scaling, "' is not supported"));
    }
    c.rope_scaling = "llama3";
    absl::Status v = c.Validate();
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": rope_freqs.weight: ", v.message()));
  }
  const int64_t dim = c.dim, vocab = c.vocab_size;
  ModelWeights& w = parts.weights;
  RETURN_IF_ERROR(r.Matrix("token_embd.weight", dim, vocab, &w.tok_embeddings, &w.e_tok_embeddings));
  RETURN_IF_ERROR(r.Load("output_norm.weight", {dim}, &w.final_norm));
  if (!c.shared_classifier) {
    RETURN_IF_ERROR(r.Matrix("output.weight", dim, vocab, &w.classifier, &w.e_classifier));
  }
  RETURN_IF_ERROR(RefuseMoeTensors(g, path, c));
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) RETURN_IF_ERROR(LoadGgufLayer(r, c, l, &w.layers[l]));
  RETURN_IF_ERROR(RefuseUnusedTensors(path, g, r.consumed));
  if (options.keep_encoding) w.backing = file;
  return parts;
}

namespace {

// StringArray / NumberArray: metadata arrays (empty when absent or of
// another element type).
std::vector<std::string> StringArray(const Gguf& g, const std::string& key) {
  auto it = g.kv.find(key);
  if (it == g.kv.end() || it->second.v.index() != 3) return {};
  return std::get<std::vector<std::string>>(it->second.v);
}
std::vector<double> NumberArray(const Gguf& g, const std::string& key) {
  auto it = g.kv.find(key);
  if (it == g.kv.end() || it->second.v.index() != 2) return {};
  return std::get<std::vector<double>>(it->second.v);
}

// OptNumber: a numeric (or bool) key, nullopt when absent or not a number.
std::optional<double> OptNumber(const Gguf& g, const std::string& key) {
  auto it = g.kv.find(key);
  if (it == g.kv.end() || !it->second.is_number()) return std::nullopt;
  return std::get<double>(it->second.v);
}

GgufTokenizerKeys TokenizerKeys(const Gguf& g) {
  GgufTokenizerKeys k;
  k.model = GetStringOr(g, "tokenizer.ggml.model", "");
  if (auto it = g.kv.find("tokenizer.ggml.pre"); it != g.kv.end() && it->second.v.index() == 1) {
    k.pre = std::get<std::string>(it->second.v);
  }
  if (auto it = g.kv.find("tokenizer.ggml.tokens"); it != g.kv.end() && it->second.v.index() == 3) {
    k.n_tokens = static_cast<int64_t>(std::get<std::vector<std::string>>(it->second.v).size());
  }
  auto id = [&](const char* key) -> std::optional<int64_t> {
    std::optional<double> x = OptNumber(g, key);
    if (!x.has_value()) return std::nullopt;
    return static_cast<int64_t>(*x);
  };
  k.bos_token_id = id("tokenizer.ggml.bos_token_id");
  k.eos_token_id = id("tokenizer.ggml.eos_token_id");
  if (std::optional<double> x = OptNumber(g, "tokenizer.ggml.add_bos_token")) k.add_bos_token = *x != 0;
  if (std::optional<double> x = OptNumber(g, "tokenizer.ggml.add_eos_token")) k.add_eos_token = *x != 0;
  return k;
}

// Specials: the BOS/EOS decision (special_tokens.h) of a parsed GGUF.
absl::StatusOr<SpecialTokens> Specials(const Gguf& g, const std::string& path) {
  absl::StatusOr<SpecialTokens> s = DecideSpecialTokens(TokenizerKeys(g));
  if (!s.ok()) return absl::Status(s.status().code(), absl::StrCat(path, ": ", s.status().message()));
  return s;
}

// GgufBpe: the "gpt2" vocabulary of a parsed GGUF.
absl::StatusOr<GgufBpeVocab> GgufBpe(const Gguf& g, const std::string& path) {
  GgufBpeVocab v;
  v.tokens = StringArray(g, "tokenizer.ggml.tokens");
  if (v.tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing tokenizer.ggml.tokens"));
  }
  v.merges = StringArray(g, "tokenizer.ggml.merges");
  for (double t : NumberArray(g, "tokenizer.ggml.token_type")) v.types.push_back(static_cast<int32_t>(t));
  if (!v.types.empty() && v.types.size() != v.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer.ggml.token_type has ",
                                                   v.types.size(), " entries for ", v.tokens.size(),
                                                   " tokens"));
  }
  v.pre = GetStringOr(g, "tokenizer.ggml.pre", "default");
  ASSIGN_OR_RETURN(const SpecialTokens st, Specials(g, path));
  v.bos = st.bos_id;
  v.eos = st.eos_id;
  v.add_bos = st.add_bos;
  const double unk = GetNumberOr(g, "tokenizer.ggml.unknown_token_id", -1);
  v.unk = (unk >= 0 && unk < static_cast<double>(v.tokens.size())) ? static_cast<int32_t>(unk) : -1;
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  ASSIGN_OR_RETURN(Gguf g, ParseGguf(f));
  const std::string model = GetStringOr(g, "tokenizer.ggml.model", "");
  if (model == "gpt2") {
    ASSIGN_OR_RETURN(GgufBpeVocab v, GgufBpe(g, path));
    return MakeGgufBpeTokenizer(v, path);
  }
  ASSIGN_OR_RETURN(LlamaVocab v, LoadGgufVocab(path));
  return MakeLlamaTokenizer(std::move(v));
}

absl::StatusOr<LlamaVocab> LoadGgufVocab(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  ASSIGN_OR_RETURN(Gguf g, ParseGguf(f));
  const std::string model = GetStringOr(g, "tokenizer.ggml.model", "");
  if (model != "llama") {
    return absl::UnimplementedError(absl::StrCat(
        path, ": embedded tokenizer model '", model,
        "' is not supported ('llama' SentencePiece-style and 'gpt2' byte-level BPE are)"));
  }
  auto tok = g.kv.find("tokenizer.ggml.tokens");
  if (tok == g.kv.end() || tok->second.v.index() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing tokenizer.ggml.tokens"));
  }
  LlamaVocab v;
  const auto& toks = std::get<std::vector<std::string>>(tok->second.v);
  v.pieces.reserve(toks.size());
  for (const std::string& t : toks) v.pieces.push_back(absl::StrReplaceAll(t, {{"\xE2\x96\x81", " "}}));
  v.scores.assign(toks.size(), 0.0f);
  if (auto it = g.kv.find("tokenizer.ggml.scores"); it != g.kv.end() && it->second.v.index() == 2) {
    const auto& s = std::get<std::vector<double>>(it->second.v);
    if (s.size() != toks.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer.ggml.scores has ", s.size(),
                                                     " entries for ", toks.size(), " tokens"));
    }
    for (size_t i = 0; i < s.size(); ++i) v.scores[i] = static_cast<float>(s[i]);
  }
  if (auto it = g.kv.find("tokenizer.ggml.token_type"); it != g.kv.end() && it->second.v.index() == 2) {
    const auto& s = std::get<std::vector<double>>(it->second.v);
    if (s.size() == toks.size()) {
      for (double x : s) v.types.push_back(static_cast<int32_t>(x));
    }
  }
  auto id = [&](const char* key, int32_t def) {
    double x = GetNumberOr(g, key, def);
    return (x >= 0 && x < static_cast<double>(toks.size())) ? static_cast<int32_t>(x) : -1;
  };
  ASSIGN_OR_RETURN(const SpecialTokens st, Specials(g, path));
  v.bos_id = st.bos_id;
  v.eos_id = st.eos_id;
  v.add_bos = st.add_bos;
  v.unk_id = id("tokenizer.ggml.unknown_token_id", 0);
  v.add_space_prefix = GetNumberOr(g, "tokenizer.ggml.add_space_prefix", 1.0) != 0;
  return v;
}

}  // namespace ragkv::model::internal

namespace ragkv::model {

absl::StatusOr<GgufTokenizerKeys> ReadGgufTokenizerKeys(const std::string& path) {
  ASSIGN_OR_RETURN(internal::MappedFile f, internal::MappedFile::Open(path));
  ASSIGN_OR_RETURN(internal::Gguf g, internal::ParseGguf(f));
  GgufTokenizerKeys k = internal::TokenizerKeys(g);
  if (k.model.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing tokenizer.ggml.model"));
  }
  return k;
}

}  // namespace ragkv::model
