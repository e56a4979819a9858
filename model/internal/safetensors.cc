// Hugging Face config.json + *.safetensors (single file or sharded with
// model.safetensors.index.json). LlamaForCausalLM / MistralForCausalLM /
// Qwen2ForCausalLM tensor names; F32/F16/BF16.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/weight_gemm.h"
#include "model/internal/loaders.h"
#include "model/internal/rope_scaling.h"

namespace ragkv::model::internal {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON"));
  return j;
}

struct StTensor {
  int file = 0;
  kernels::DType dtype = kernels::DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // absolute byte offsets in the file
};

// Parses one safetensors header into `out` (name -> tensor).
absl::Status ParseSafetensorsHeader(const MappedFile& f, int file_index,
                                    std::map<std::string, StTensor>* out) {
  const std::string& path = f.path();
  uint64_t n = 0;
  RETURN_IF_ERROR(f.Check(0, 8, "safetensors header length"));
  std::memcpy(&n, f.data(), 8);
  if (n < 2 || n > (uint64_t{100} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header length ", n, " is implausible: not a safetensors file?"));
  }
  RETURN_IF_ERROR(f.Check(8, n, "safetensors JSON header"));
  json h = json::parse(f.data() + 8, f.data() + 8 + n, nullptr, false);
  if (h.is_discarded() || !h.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": safetensors header is not a JSON object"));
  }
  const uint64_t base = 8 + n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& t = it.value();
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() ||
        !t.contains("shape") || !t["shape"].is_array() || !t.contains("data_offsets") ||
        !t["data_offsets"].is_array() || t["data_offsets"].size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": malformed entry for tensor ", it.key()));
    }
    StTensor st;
    st.file = file_index;
    const std::string dt = t["dtype"].get<std::string>();
    if (dt == "F32") st.dtype = kernels::DType::kF32;
    else if (dt == "F16") st.dtype = kernels::DType::kF16;
    else if (dt == "BF16") st.dtype = kernels::DType::kBF16;
    else st.dtype = kernels::DType::kI8;  // marks unsupported; reported if the tensor is used
    uint64_t numel = 1;
    for (const json& d : t["shape"]) {
      if (!d.is_number_unsigned()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", it.key(), " has a bad shape"));
      }
      st.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
    }
    const json& o = t["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", it.key(), " has bad data_offsets"));
    }
    st.begin = base + o[0].get<uint64_t>();
    st.end = base + o[1].get<uint64_t>();
    if (st.end < st.begin || st.end > f.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: truncated: tensor %s spans bytes [%d, %d) but the file has %d", path, it.key(),
          st.begin, st.end, f.size()));
    }
    if (st.dtype != kernels::DType::kI8 &&
        st.end - st.begin != numel * kernels::DTypeSize(st.dtype)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tensor %s: %d bytes for %d elements of %s", path, it.key(), st.end - st.begin,
          numel, dt));
    }
    if (st.dtype == kernels::DType::kI8) st.shape.push_back(-1);  // never matches a want shape
    (*out)[it.key()] = std::move(st);
  }
  return absl::OkStatus();
}

// Config field helpers (types checked; the JSON is untrusted).
absl::Status GetInt(const json& j, const std::string& file, const char* key, int* out,
                    bool required = true) {
  if (!j.contains(key) || j[key].is_null()) {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(file, ": missing \"", key, "\""));
  }
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0 ||
      j[key].get<int64_t>() > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": \"", key, "\" must be a non-negative integer"));
  }
  *out = static_cast<int>(j[key].get<int64_t>());
  return absl::OkStatus();
}
absl::Status GetFloat(const json& j, const std::string& file, const char* key, float* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": \"", key, "\" must be a number"));
  }
  *out = j[key].get<float>();
  return absl::OkStatus();
}

// ListShards: the checkpoint's .safetensors files: those the index names
// (no paths allowed), else every *.safetensors in the directory, sorted.
absl::StatusOr<std::vector<std::string>> ListShards(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    ASSIGN_OR_RETURN(json idx, ReadJsonFile(index.string()));
    if (!idx.contains("weight_map") || !idx["weight_map"].is_object()) {
      return absl::InvalidArgumentError(index.string() + ": missing weight_map");
    }
    std::set<std::string> names;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return absl::InvalidArgumentError(index.string() + ": bad weight_map");
      const std::string fname = it.value().get<std::string>();
      if (fname.find('/') != std::string::npos) {
        return absl::InvalidArgumentError(index.string() + ": shard name with a path: " + fname);
      }
      names.insert(fname);
    }
    for (const auto& n : names) files.push_back((dir / n).string());
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat(dir.string(), ": no *.safetensors files"));
  }
  return files;
}

// ReadHfYarn: an HF rope_scaling block of type "yarn" (transformers'
// _compute_yarn_parameters, with `factor` taken as written, as vLLM and
// llama.cpp's converter take it): factor, original_max_position_embeddings
// (default: max_position_embeddings), beta_fast / beta_slow (32 / 1),
// attention_factor (default from mscale / mscale_all_dim, else
// 0.1 ln(factor) + 1). truncate = false is refused.
absl::Status ReadHfYarn(const json& rs, const std::string& cfg_path, ModelConfig* c) {
  // opt: a number > 0 (>= 0 with `zero_unset`: 0 reads as absent, as
  // transformers' truthiness test of mscale / mscale_all_dim does).
  auto opt = [&](const char* k, double def, double* out, bool zero_unset = false) -> absl::Status {
    *out = def;
    if (!rs.contains(k) || rs[k].is_null()) return absl::OkStatus();
    if (zero_unset && rs[k].is_number() && rs[k].get<double>() == 0) return absl::OkStatus();
    if (!rs[k].is_number() || !(rs[k].get<double>() > 0) || !std::isfinite(rs[k].get<double>())) {
      return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": rope_scaling.", k, " must be a number > 0"));
    }
    *out = rs[k].get<double>();
    return absl::OkStatus();
  };
  if (rs.contains("truncate") && rs["truncate"].is_boolean() && !rs["truncate"].get<bool>()) {
    return absl::UnimplementedError(cfg_path + ": rope_scaling.truncate = false is not supported");
  }
  YarnParams yp;
  double mscale = 0, mscale_all = 0, attn = 0;
  RETURN_IF_ERROR(opt("factor", 0, &yp.factor));
  if (!(yp.factor >= 1)) return absl::InvalidArgumentError(cfg_path + ": rope_scaling.factor must be >= 1");
  RETURN_IF_ERROR(opt("original_max_position_embeddings", c->max_seq_len, &yp.original));
  RETURN_IF_ERROR(opt("beta_fast", 32, &yp.beta_fast));
  RETURN_IF_ERROR(opt("beta_slow", 1, &yp.beta_slow));
  RETURN_IF_ERROR(opt("mscale", 0, &mscale, /*zero_unset=*/true));
  RETURN_IF_ERROR(opt("mscale_all_dim", 0, &mscale_all, /*zero_unset=*/true));
  RETURN_IF_ERROR(opt("attention_factor", 0, &attn));
  if (attn == 0) {
    auto get = [&](double m) { return yp.factor <= 1 ? 1.0 : 0.1 * m * std::log(yp.factor) + 1.0; };
    attn = mscale > 0 && mscale_all > 0 ? get(mscale) / get(mscale_all) : YarnMscale(yp.factor);
  }
  const int hd = c->head_dim ? c->head_dim : (c->n_heads ? c->dim / c->n_heads : 0);
  if (hd <= 0 || hd % 2) return absl::InvalidArgumentError(cfg_path + ": bad head_dim for rope_scaling");
  c->rope_scaling = "yarn";
  c->rope_freq_factors = YarnRopeFactors(c->rope_theta, hd, yp);
  c->rope_mscale = static_cast<float>(attn);
  return absl::OkStatus();
}

// ReadHfRopeScaling: config.json's rope_scaling: null/absent = none;
// "linear" (factor); "llama3" (factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings) -> per-pair factors; "yarn"
// (ReadHfYarn). Any other type (dynamic, longrope, ...) is refused by name.
absl::Status ReadHfRopeScaling(const json& cfg, const std::string& cfg_path, ModelConfig* c) {
  if (!cfg.contains("rope_scaling") || cfg["rope_scaling"].is_null()) return absl::OkStatus();
  const json& rs = cfg["rope_scaling"];
  if (!rs.is_object()) return absl::InvalidArgumentError(cfg_path + ": rope_scaling is not an object");
  std::string type;
  for (const char* k : {"rope_type", "type"}) {
    if (type.empty() && rs.contains(k) && rs[k].is_string()) type = rs[k].get<std::string>();
  }
  auto num = [&](const char* k, double* out) -> absl::Status {
    if (!rs.contains(k) || !rs[k].is_number() || !(rs[k].get<double>() > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(cfg_path, ": rope_scaling.", k, " must be a number > 0"));
    }
    *out = rs[k].get<double>();
    return absl::OkStatus();
  };
  double factor = 0;
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    RETURN_IF_ERROR(num("factor", &factor));
    c->rope_scaling = "linear";
    c->rope_freq_scale = static_cast<float>(1.0 / factor);
    return absl::OkStatus();
  }
  if (type == "llama3") {
    double low = 0, high = 0, original = 0;
    RETURN_IF_ERROR(num("factor", &factor));
    RETURN_IF_ERROR(num("low_freq_factor", &low));
    RETURN_IF_ERROR(num("high_freq_factor", &high));
    RETURN_IF_ERROR(num("original_max_position_embeddings", &original));
    if (!(high > low)) {
      return absl::InvalidArgumentError(cfg_path + ": rope_scaling high_freq_factor <= low_freq_factor");
    }
    const int hd = c->head_dim ? c->head_dim : (c->n_heads ? c->dim / c->n_heads : 0);
    if (hd <= 0 || hd % 2) return absl::InvalidArgumentError(cfg_path + ": bad head_dim for rope_scaling");
    c->rope_scaling = "llama3";
    c->rope_freq_factors = Llama3RopeFactors(c->rope_theta, hd, factor, low, high, original);
    return absl::OkStatus();
  }
  if (type == "yarn") return ReadHfYarn(rs, cfg_path, c);
  return absl::UnimplementedError(absl::StrCat(cfg_path, ": rope_scaling type '", type,
                                               "' is not supported (linear, llama3, yarn are)"));
}

// LoadHfLayer: layer l's tensors through `load` (name, shape, out) and, for
// the matrices, `matrix` (name, rows, cols, f32 out, view out).
template <typename Load, typename Matrix>
absl::Status LoadHfLayer(Load& load, Matrix& matrix, const ModelConfig& c, int l, LayerWeights* lw) {
  const int64_t dim = c.dim, ffn = c.hidden_dim, qd = c.q_dim(), kvd = c.kv_dim();
  const std::string p = absl::StrCat("model.layers.", l, ".");
  RETURN_IF_ERROR(load(p + "input_layernorm.weight", {dim}, &lw->attn_norm));
  RETURN_IF_ERROR(matrix(p + "self_attn.q_proj.weight", qd, dim, &lw->wq, &lw->e_wq));
  RETURN_IF_ERROR(matrix(p + "self_attn.k_proj.weight", kvd, dim, &lw->wk, &lw->e_wk));
  RETURN_IF_ERROR(matrix(p + "self_attn.v_proj.weight", kvd, dim, &lw->wv, &lw->e_wv));
  if (c.qkv_bias) {
    RETURN_IF_ERROR(load(p + "self_attn.q_proj.bias", {qd}, &lw->bq));
    RETURN_IF_ERROR(load(p + "self_attn.k_proj.bias", {kvd}, &lw->bk));
    RETURN_IF_ERROR(load(p + "self_attn.v_proj.bias", {kvd}, &lw->bv));
  }
  if (c.qk_norm) {
    RETURN_IF_ERROR(load(p + "self_attn.q_norm.weight", {c.head_dim}, &lw->q_norm));
    RETURN_IF_ERROR(load(p + "self_attn.k_norm.weight", {c.head_dim}, &lw->k_norm));
  }
  RETURN_IF_ERROR(matrix(p + "self_attn.o_proj.weight", dim, qd, &lw->wo, &lw->e_wo));
  RETURN_IF_ERROR(load(p + "post_attention_layernorm.weight", {dim}, &lw->ffn_norm));
  RETURN_IF_ERROR(matrix(p + "mlp.gate_proj.weight", ffn, dim, &lw->w_gate, &lw->e_gate));
  RETURN_IF_ERROR(matrix(p + "mlp.up_proj.weight", ffn, dim, &lw->w_up, &lw->e_up));
  return matrix(p + "mlp.down_proj.weight", dim, ffn, &lw->w_down, &lw->e_down);
}

absl::StatusOr<ModelParts> LoadHfImpl(const std::string& input, const LoadOptions& options) {
  fs::path dir = input;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  const std::string cfg_path = (dir / "config.json").string();
  ASSIGN_OR_RETURN(json cfg, ReadJsonFile(cfg_path));
  if (!cfg.is_object()) return absl::InvalidArgumentError(cfg_path + ": not a JSON object");

  ModelParts parts;
  parts.format = ModelFormat::kSafetensors;
  ModelConfig& c = parts.config;
  std::string arch_name;
  if (cfg.contains("architectures") && cfg["architectures"].is_array() &&
      !cfg["architectures"].empty() && cfg["architectures"][0].is_string()) {
    arch_name = cfg["architectures"][0].get<std::string>();
  } else if (cfg.contains("model_type") && cfg["model_type"].is_string()) {
    arch_name = cfg["model_type"].get<std::string>();
  }
  if (arch_name == "LlamaForCausalLM" || arch_name == "llama") {
    c.arch = "llama";
  } else if (arch_name == "MistralForCausalLM" || arch_name == "mistral") {
    c.arch = "mistral";
  } else if (arch_name == "Qwen2ForCausalLM" || arch_name == "qwen2") {
    c.arch = "qwen2";
  } else if (arch_name == "Qwen3ForCausalLM" || arch_name == "qwen3") {
    c.arch = "qwen3";
    c.qk_norm = true;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        cfg_path, ": architecture '", arch_name,
        "' is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
        "Qwen3ForCausalLM)"));
  }
  RETURN_IF_ERROR(GetInt(cfg, cfg_path, "hidden_size", &c.dim));
  RETURN_IF_ERROR(GetInt(cfg, cfg_path, "intermediate_size", &c.hidden_dim));
  RETURN_IF_ERROR(GetInt(cfg, cfg_path, "num_hidden_layers", &c.n_layers));
  RETURN_IF_ERROR(GetInt(cfg, cfg_path, "num_attention_heads", &c.n_heads));
  c.n_kv_heads = c.n_heads;
  RETURN_IF_ERROR(GetInt(cfg, cfg_path, "num_key_value_heads", &c.n_kv_heads, false));
  RETURN_IF_ERROR(GetInt(cfg, cfg_path, "head_dim", &c.head_dim, false));
  RETURN_IF_ERROR(GetInt(cfg, cfg_path, "vocab_size", &c.vocab_size));
  c.max_seq_len = 2048;
  RETURN_IF_ERROR(GetInt(cfg, cfg_path, "max_position_embeddings", &c.max_seq_len, false));
  RETURN_IF_ERROR(GetFloat(cfg, cfg_path, "rms_norm_eps", &c.norm_eps));
  RETURN_IF_ERROR(GetFloat(cfg, cfg_path, "rope_theta", &c.rope_theta));
  // HF's default differs per class; LlamaConfig and Qwen2Config default to
  // untied, so absence means untied unless lm_head.weight is missing.
  bool tied = cfg.contains("tie_word_embeddings") && cfg["tie_word_embeddings"].is_boolean() &&
              cfg["tie_word_embeddings"].get<bool>();
  c.qkv_bias = c.arch == "qwen2" || (cfg.contains("attention_bias") &&
                                     cfg["attention_bias"].is_boolean() &&
                                     cfg["attention_bias"].get<bool>());
  RETURN_IF_ERROR(ReadHfRopeScaling(cfg, cfg_path, &c));
  if (cfg.contains("partial_rotary_factor") && cfg["partial_rotary_factor"].is_number() &&
      cfg["partial_rotary_factor"].get<double>() != 1.0) {
    return absl::UnimplementedError(cfg_path + ": partial_rotary_factor != 1 is not supported");
  }
  // Sliding-window attention equals full attention within the window, so
  // the context is capped at it.
  bool use_sw = c.arch == "mistral" ||
                (cfg.contains("use_sliding_window") && cfg["use_sliding_window"].is_boolean() &&
                 cfg["use_sliding_window"].get<bool>());
  if (use_sw && cfg.contains("sliding_window") && cfg["sliding_window"].is_number_integer()) {
    int sw = static_cast<int>(cfg["sliding_window"].get<int64_t>());
    if (sw > 0 && sw < c.max_seq_len) c.max_seq_len = sw;
  }
  // Weights are stored for half-split RoPE (HF permutes q/k rows): keep that
  // layout so exported keys are what an HF-layout engine caches.
  c.rope_layout = kernels::RopeLayout::kHalfSplit;
  c.kv_dtype = options.kv_dtype;

  ASSIGN_OR_RETURN(std::vector<std::string> files, ListShards(dir));
  auto mapped = std::make_shared<std::vector<MappedFile>>();
  std::vector<MappedFile>& maps = *mapped;
  std::map<std::string, StTensor> tensors;
  for (size_t i = 0; i < files.size(); ++i) {
    ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(files[i]));
    RETURN_IF_ERROR(ParseSafetensorsHeader(m, static_cast<int>(i), &tensors));
    maps.push_back(std::move(m));
  }
  if (!tensors.count("lm_head.weight")) tied = true;
  c.shared_classifier = tied;
  absl::Status v = c.Validate();
  if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(cfg_path, ": ", v.message()));
  if (options.max_seq_len > 0) c.max_seq_len = options.max_seq_len;

  auto load = [&](const std::string& name, std::vector<int64_t> want,
                  std::vector<float>* out) -> absl::Status {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(dir.string(), ": missing tensor ", name));
    }
    const StTensor& t = it->second;
    const MappedFile& m = maps[t.file];
    if (t.dtype == kernels::DType::kI8) {
      return absl::UnimplementedError(absl::StrCat(
          m.path(), ": tensor ", name, " has an unsupported dtype (F32, F16, BF16 only)"));
    }
    RETURN_IF_ERROR(CheckShape(m.path(), name, t.shape, want));
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    return ReadTensorF32(m, t.begin, t.dtype, n, name, out);
  };
  // matrix: a [rows, cols] weight, kept in the file's F32/F16/BF16 encoding
  // (a view of the mapping) when options.keep_encoding, else widened.
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, std::vector<float>* f32,
                    kernels::WeightMatrix* view) -> absl::Status {
    auto it = tensors.find(name);
    if (!options.keep_encoding || it == tensors.end() || it->second.dtype == kernels::DType::kI8) {
      return load(name, {rows, cols}, f32);
    }
    const StTensor& t = it->second;
    const MappedFile& m = maps[t.file];
    RETURN_IF_ERROR(CheckShape(m.path(), name, t.shape, {rows, cols}));
    const kernels::GgmlType type = t.dtype == kernels::DType::kF16    ? kernels::GgmlType::kF16
                                   : t.dtype == kernels::DType::kBF16 ? kernels::GgmlType::kBF16
                                                                      : kernels::GgmlType::kF32;
    ASSIGN_OR_RETURN(*view, kernels::MakeWeightMatrix(type, m.data() + t.begin, rows, cols));
    if (t.begin + view->bytes() > m.size()) {
      return absl::InvalidArgumentError(absl::StrCat(m.path(), ": truncated: tensor ", name));
    }
    return absl::OkStatus();
  };
  const int64_t dim = c.dim, vocab = c.vocab_size;
  ModelWeights& w = parts.weights;
  RETURN_IF_ERROR(matrix("model.embed_tokens.weight", vocab, dim, &w.tok_embeddings,
                         &w.e_tok_embeddings));
  RETURN_IF_ERROR(load("model.norm.weight", {dim}, &w.final_norm));
  if (!tied) RETURN_IF_ERROR(matrix("lm_head.weight", vocab, dim, &w.classifier, &w.e_classifier));
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) RETURN_IF_ERROR(LoadHfLayer(load, matrix, c, l, &w.layers[l]));
  if (options.keep_encoding) w.backing = mapped;
  return parts;
}

}  // namespace

absl::StatusOr<ModelParts> LoadHfSafetensors(const std::string& path, const LoadOptions& options) {
  // nlohmann::json throws on type errors; this is the one place they are
  // translated (all accesses above are type-checked first, so this is a
  // backstop).
  try {
    return LoadHfImpl(path, options);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed Hugging Face checkpoint: ", e.what()));
  }
}

}  // namespace ragkv::model::internal
