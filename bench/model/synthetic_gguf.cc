#include "bench/model/synthetic_gguf.h"

#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/synthetic.h"
#include "tests/support/gguf_writer.h"

#if RAGKV_HAVE_LLAMACPP_HEADERS
#include "llama.h"
#endif

namespace ragkv::model {
namespace {

// WriteParts: a llama GGUF of `p` (matrices F16 when `f16`, norms F32), with
// a small SentencePiece-style vocabulary so llama.cpp loads it.
void WriteParts(const ModelParts& p, bool f16, const std::string& path) {
  const ModelConfig& c = p.config;
  const ModelWeights& w = p.weights;
  testing::GgufWriter g;
  g.KvStr("general.architecture", "llama");
  g.KvU32("llama.context_length", c.max_seq_len);
  g.KvU32("llama.embedding_length", c.dim);
  g.KvU32("llama.feed_forward_length", c.hidden_dim);
  g.KvU32("llama.block_count", c.n_layers);
  g.KvU32("llama.attention.head_count", c.n_heads);
  g.KvU32("llama.attention.head_count_kv", c.n_kv_heads);
  g.KvU32("llama.attention.key_length", c.head_dim);
  g.KvU32("llama.attention.value_length", c.head_dim);
  g.KvF32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  g.KvF32("llama.rope.freq_base", c.rope_theta);
  testing::AddTinyLlamaVocab(&g, c.vocab_size);
  const uint64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), f = c.hidden_dim, v = c.vocab_size;
  g.Tensor("token_embd.weight", {d, v}, w.tok_embeddings, f16);
  g.Tensor("output_norm.weight", {d}, w.final_norm, false);
  if (!c.shared_classifier) g.Tensor("output.weight", {d, v}, w.classifier, f16);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string b = absl::StrCat("blk.", l, ".");
    g.Tensor(b + "attn_norm.weight", {d}, L.attn_norm, false);
    g.Tensor(b + "attn_q.weight", {d, q}, L.wq, f16);
    g.Tensor(b + "attn_k.weight", {d, kv}, L.wk, f16);
    g.Tensor(b + "attn_v.weight", {d, kv}, L.wv, f16);
    g.Tensor(b + "attn_output.weight", {q, d}, L.wo, f16);
    g.Tensor(b + "ffn_norm.weight", {d}, L.ffn_norm, false);
    g.Tensor(b + "ffn_gate.weight", {d, f}, L.w_gate, f16);
    g.Tensor(b + "ffn_up.weight", {d, f}, L.w_up, f16);
    g.Tensor(b + "ffn_down.weight", {f, d}, L.w_down, f16);
  }
  g.Write(path);
}

absl::Status Quantize(const std::string& lib_dir, const std::string& in, const std::string& out,
                      int ftype) {
#if RAGKV_HAVE_LLAMACPP_HEADERS
  void* lib = dlopen((lib_dir + "/libllama.v0.4.0.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return absl::NotFoundError(absl::StrCat("llama.cpp not found in ", lib_dir));
  auto defaults = reinterpret_cast<decltype(&llama_model_quantize_default_params)>(
      dlsym(lib, "llama_model_quantize_default_params"));
  auto quantize = reinterpret_cast<decltype(&llama_model_quantize)>(dlsym(lib, "llama_model_quantize"));
  if (defaults == nullptr || quantize == nullptr) return absl::NotFoundError("llama.cpp: no quantizer");
  auto log_set = reinterpret_cast<decltype(&llama_log_set)>(dlsym(lib, "llama_log_set"));
  if (log_set != nullptr) log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_model_quantize_params p = defaults();
  p.ftype = static_cast<llama_ftype>(ftype);
  if (quantize(in.c_str(), out.c_str(), &p) != 0) {
    return absl::InternalError(absl::StrCat("llama_model_quantize(", in, ", ftype ", ftype, ") failed"));
  }
  return absl::OkStatus();
#else
  return absl::UnimplementedError("built without the pinned llama.cpp headers: cannot quantize");
#endif
}

}  // namespace

absl::Status WriteSyntheticGguf(const std::string& spec, const std::string& encoding,
                                const std::string& lib_dir, const std::string& path) {
  // llama_ftype values of the pinned llama.h.
  static const std::map<std::string, int> kFtypes = {
      {"q4_0", 2}, {"q8_0", 7}, {"q4_k_m", 15}, {"q5_k_m", 17}, {"q6_k", 18}};
  if (encoding != "f32" && encoding != "f16" && !kFtypes.count(encoding)) {
    return absl::InvalidArgumentError("unknown --encoding " + encoding +
                                      " (f32, f16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k)");
  }
  ASSIGN_OR_RETURN(SyntheticSpec s, ParseSyntheticSpec(spec));
  ASSIGN_OR_RETURN(ModelParts parts, MakeSyntheticParts(s));
  if (encoding == "f32" || encoding == "f16") {
    WriteParts(parts, encoding == "f16", path);
    return absl::OkStatus();
  }
  const std::string f16 = path + ".f16";
  WriteParts(parts, true, f16);
  const absl::Status q = Quantize(lib_dir, f16, path, kFtypes.at(encoding));
  std::remove(f16.c_str());
  return q;
}

}  // namespace ragkv::model
