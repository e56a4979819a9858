// gguf_writer.h: a minimal GGUF v2/v3 writer for tests (header-only): typed
// metadata (u32, i32, f32, bool, string, string/f32/i32 arrays) and F32/F16
// tensors with ggml dims, 32-byte aligned. Enough to write seeded random
// models of every architecture ragkv reads, with a small SentencePiece-style
// vocabulary llama.cpp accepts (AddTinyLlamaVocab).
#ifndef RAGKV_TESTS_SUPPORT_GGUF_WRITER_H_
#define RAGKV_TESTS_SUPPORT_GGUF_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <utility>

#include "kernels/convert.h"
#include "model/parts.h"

namespace ragkv::testing {

class GgufWriter {
 public:
  void KvU32(const std::string& k, uint32_t v) { Key(k, 4), Pod(&kv_, v); }
  void KvI32(const std::string& k, int32_t v) { Key(k, 5), Pod(&kv_, v); }
  void KvF32(const std::string& k, float v) { Key(k, 6), Pod(&kv_, v); }
  void KvBool(const std::string& k, bool v) { Key(k, 7), Pod(&kv_, uint8_t{v}); }
  void KvStr(const std::string& k, const std::string& v) { Key(k, 8), Str(&kv_, v); }
  void KvStrs(const std::string& k, const std::vector<std::string>& v) {
    Key(k, 9), Pod(&kv_, uint32_t{8}), Pod(&kv_, uint64_t(v.size()));
    for (const std::string& s : v) Str(&kv_, s);
  }
  void KvF32s(const std::string& k, const std::vector<float>& v) {
    Key(k, 9), Pod(&kv_, uint32_t{6}), Pod(&kv_, uint64_t(v.size()));
    for (float x : v) Pod(&kv_, x);
  }
  void KvI32s(const std::string& k, const std::vector<int32_t>& v) {
    Key(k, 9), Pod(&kv_, uint32_t{5}), Pod(&kv_, uint64_t(v.size()));
    for (int32_t x : v) Pod(&kv_, x);
  }
  // Tensor: dims in ggml order (contiguous first); F16 when `f16`.
  void Tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v,
              bool f16) {
    Str(&info_, name);
    Pod(&info_, uint32_t(dims.size()));
    for (uint64_t d : dims) Pod(&info_, d);
    Pod(&info_, uint32_t{f16 ? 1u : 0u});
    while (data_.size() % 32) data_.push_back('\0');
    Pod(&info_, uint64_t(data_.size()));
    for (float x : v) {
      if (f16) {
        Pod(&data_, kernels::FloatToHalf(x));
      } else {
        Pod(&data_, x);
      }
    }
    ++n_tensors_;
  }
  void Write(const std::string& path, uint32_t version = 3) const {
    std::string o = "GGUF";
    Pod(&o, version);
    Pod(&o, n_tensors_);
    Pod(&o, n_kv_);
    o += kv_;
    o += info_;
    while (o.size() % 32) o.push_back('\0');
    o += data_;
    std::ofstream(path, std::ios::binary) << o;
  }

 private:
  template <typename T>
  static void Pod(std::string* o, T v) {
    o->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static void Str(std::string* o, const std::string& s) {
    Pod(o, uint64_t(s.size()));
    *o += s;
  }
  void Key(const std::string& k, uint32_t type) {
    Str(&kv_, k);
    Pod(&kv_, type);
    ++n_kv_;
  }

  std::string kv_, info_, data_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
};

// AddTinyLlamaVocab: a `vocab`-token SentencePiece-style ("llama")
// tokenizer: <unk>, <s>, </s>, the 256 byte tokens, then letters and
// letter pairs. vocab >= 262.
inline void AddTinyLlamaVocab(GgufWriter* w, int vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  for (int i = 0; static_cast<int>(tokens.size()) < vocab; ++i) {
    std::string t = i < 26 ? std::string(1, char('a' + i))
                           : std::string(1, char('a' + (i / 26) % 26)) + char('a' + i % 26);
    if (i >= 26 * 27) t += std::to_string(i);
    tokens.push_back("\xE2\x96\x81" + t);
    types.push_back(1);
  }
  w->KvStr("tokenizer.ggml.model", "llama");
  w->KvStrs("tokenizer.ggml.tokens", tokens);
  w->KvF32s("tokenizer.ggml.scores", std::vector<float>(tokens.size(), 0.0f));
  w->KvI32s("tokenizer.ggml.token_type", types);
  w->KvU32("tokenizer.ggml.bos_token_id", 1);
  w->KvU32("tokenizer.ggml.eos_token_id", 2);
  w->KvU32("tokenizer.ggml.unknown_token_id", 0);
}

// LlamaGgufOptions / WriteLlamaGguf: model parts as an architecture-llama
// GGUF: matrices F16 when `f16` (norms F32), a tiny vocabulary of
// `vocab_tokens` when > 0 (llama.cpp needs one), and `extra` 1-D F32 tensors
// the runtime may not read (e.g. rope_freqs.weight).
struct LlamaGgufOptions {
  bool f16 = false;
  uint32_t version = 3;
  int vocab_tokens = 0;
  std::vector<std::pair<std::string, std::vector<float>>> extra;
};

inline void WriteLlamaGguf(const model::ModelParts& p, const LlamaGgufOptions& o,
                           const std::string& path) {
  const model::ModelConfig& c = p.config;
  const model::ModelWeights& w = p.weights;
  GgufWriter g;
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
  if (o.vocab_tokens > 0) AddTinyLlamaVocab(&g, o.vocab_tokens);
  const uint64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), f = c.hidden_dim, v = c.vocab_size;
  g.Tensor("token_embd.weight", {d, v}, w.tok_embeddings, o.f16);
  g.Tensor("output_norm.weight", {d}, w.final_norm, false);
  if (!c.shared_classifier) g.Tensor("output.weight", {d, v}, w.classifier, o.f16);
  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerWeights& L = w.layers[l];
    const std::string b = "blk." + std::to_string(l) + ".";
    g.Tensor(b + "attn_norm.weight", {d}, L.attn_norm, false);
    g.Tensor(b + "attn_q.weight", {d, q}, L.wq, o.f16);
    g.Tensor(b + "attn_k.weight", {d, kv}, L.wk, o.f16);
    g.Tensor(b + "attn_v.weight", {d, kv}, L.wv, o.f16);
    g.Tensor(b + "attn_output.weight", {q, d}, L.wo, o.f16);
    g.Tensor(b + "ffn_norm.weight", {d}, L.ffn_norm, false);
    g.Tensor(b + "ffn_gate.weight", {d, f}, L.w_gate, o.f16);
    g.Tensor(b + "ffn_up.weight", {d, f}, L.w_up, o.f16);
    g.Tensor(b + "ffn_down.weight", {f, d}, L.w_down, o.f16);
  }
  for (const auto& [name, values] : o.extra) g.Tensor(name, {values.size()}, values, false);
  g.Write(path, o.version);
}

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_SUPPORT_GGUF_WRITER_H_
