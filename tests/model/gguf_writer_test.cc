// GGUF F16 and v2: the test writes stories260K's weights as a minimal GGUF
// (metadata + tensors, F16 or F32, version 2 or 3) and checks the loaded
// model against the .bin.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/convert.h"
#include "model/loader.h"
#include "tests/model/test_util.h"

namespace ragkv::model {
namespace {

using ::ragkv::model::testing::ModelFile;

class GgufWriter {
 public:
  void Str(std::string* o, const std::string& s) {
    Pod(o, uint64_t(s.size()));
    *o += s;
  }
  template <typename T>
  void Pod(std::string* o, T v) {
    o->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void KvU32(const std::string& k, uint32_t v) {
    Str(&kv_, k);
    Pod(&kv_, uint32_t{4});
    Pod(&kv_, v);
    ++n_kv_;
  }
  void KvF32(const std::string& k, float v) {
    Str(&kv_, k);
    Pod(&kv_, uint32_t{6});
    Pod(&kv_, v);
    ++n_kv_;
  }
  void KvStr(const std::string& k, const std::string& v) {
    Str(&kv_, k);
    Pod(&kv_, uint32_t{8});
    Str(&kv_, v);
    ++n_kv_;
  }
  // dims in ggml order (contiguous first).
  void Tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v,
              bool f16) {
    Str(&info_, name);
    Pod(&info_, uint32_t(dims.size()));
    for (uint64_t d : dims) Pod(&info_, d);
    Pod(&info_, uint32_t{f16 ? 1u : 0u});
    while (data_.size() % 32) data_.push_back('\0');
    Pod(&info_, uint64_t(data_.size()));
    for (float x : v) {
      if (f16) Pod(&data_, kernels::FloatToHalf(x));
      else Pod(&data_, x);
    }
    ++n_tensors_;
  }
  void Write(const std::string& path, uint32_t version) {
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
  std::string kv_, info_, data_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
};

// WriteGguf: `p` as a GGUF; `extra` adds tensors the runtime does not read
// (e.g. Llama-3's rope_freqs.weight), as {name, values} 1-D F32 tensors.
void WriteGguf(const std::string& path, const ModelParts& p, bool f16, uint32_t version,
               const std::vector<std::pair<std::string, std::vector<float>>>& extra = {}) {
  const ModelConfig& c = p.config;
  const ModelWeights& w = p.weights;
  GgufWriter g;
  g.KvStr("general.architecture", "llama");
  g.KvU32("llama.context_length", c.max_seq_len);
  g.KvU32("llama.embedding_length", c.dim);
  g.KvU32("llama.feed_forward_length", c.hidden_dim);
  g.KvU32("llama.block_count", c.n_layers);
  g.KvU32("llama.attention.head_count", c.n_heads);
  g.KvU32("llama.attention.head_count_kv", c.n_kv_heads);
  g.KvF32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  g.KvF32("llama.rope.freq_base", c.rope_theta);
  const uint64_t dim = c.dim, ffn = c.hidden_dim, qd = c.q_dim(), kvd = c.kv_dim(), v = c.vocab_size;
  // Norms stay F32, as llama.cpp writes them.
  g.Tensor("token_embd.weight", {dim, v}, w.tok_embeddings, f16);
  g.Tensor("output_norm.weight", {dim}, w.final_norm, false);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string b = "blk." + std::to_string(l) + ".";
    g.Tensor(b + "attn_norm.weight", {dim}, L.attn_norm, false);
    g.Tensor(b + "attn_q.weight", {dim, qd}, L.wq, f16);
    g.Tensor(b + "attn_k.weight", {dim, kvd}, L.wk, f16);
    g.Tensor(b + "attn_v.weight", {dim, kvd}, L.wv, f16);
    g.Tensor(b + "attn_output.weight", {qd, dim}, L.wo, f16);
    g.Tensor(b + "ffn_norm.weight", {dim}, L.ffn_norm, false);
    g.Tensor(b + "ffn_gate.weight", {dim, ffn}, L.w_gate, f16);
    g.Tensor(b + "ffn_up.weight", {dim, ffn}, L.w_up, f16);
    g.Tensor(b + "ffn_down.weight", {ffn, dim}, L.w_down, f16);
  }
  for (const auto& [name, values] : extra) g.Tensor(name, {values.size()}, values, false);
  g.Write(path, version);
}

TEST(GgufWriterTest, F16AndV2LoadAndMatchBin) {
  RAGKV_REQUIRE_MODEL_FILE("stories260K.bin");
  auto parts = LoadModelParts(ModelFile("stories260K.bin"));
  ASSERT_TRUE(parts.ok());
  auto bin = LoadModel(ModelFile("stories260K.bin"));
  ASSERT_TRUE(bin.ok());
  const std::vector<int32_t> toks = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  const int vocab = parts->config.vocab_size;
  auto logits = [&](const Model& m) {
    auto kv = m.NewCache(64);
    Workspace ws;
    std::vector<float> l(toks.size() * vocab);
    EXPECT_TRUE(m.Prefill(toks, &*kv, &ws, LogitsMode::kAll, l.data()).ok());
    return l;
  };
  const auto want = logits(**bin);
  const std::string dir = ::testing::TempDir();
  for (bool f16 : {false, true}) {
    for (uint32_t version : {2u, 3u}) {
      const std::string path = dir + "/ragkv_w_" + std::to_string(::getpid()) + (f16 ? "_f16" : "_f32") +
                               std::to_string(version) + ".gguf";
      WriteGguf(path, *parts, f16, version);
      auto m = LoadModel(path);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_TRUE((*m)->config().shared_classifier);  // no output.weight
      const auto got = logits(**m);
      double err = 0;
      for (size_t i = 0; i < got.size(); ++i) err = std::max(err, double(std::abs(got[i] - want[i])));
      EXPECT_LT(err, f16 ? 0.05 : 1e-5) << (f16 ? "f16" : "f32") << " v" << version;
      if (!f16) {
        EXPECT_EQ((*m)->fingerprint(), (*bin)->fingerprint());
      }
      // No embedded vocabulary: the tokenizer load fails clearly.
      auto t = LoadTokenizer(path);
      EXPECT_FALSE(t.ok());
      std::filesystem::remove(path);
    }
  }
}

// A tensor the runtime would not read changes the math of engines that do:
// Llama-3.1/3.2 GGUFs carry rope_freqs.weight (RoPE frequency factors), and
// ignoring it loads fine and computes wrong logits (greedy ids diverge from
// llama.cpp's after 13 tokens). The file is refused, naming the tensor.
TEST(GgufWriterTest, UnreadTensorsAreRefusedByName) {
  RAGKV_REQUIRE_MODEL_FILE("stories260K.bin");
  auto parts = LoadModelParts(ModelFile("stories260K.bin"));
  ASSERT_TRUE(parts.ok());
  const std::string path =
      ::testing::TempDir() + "/ragkv_ropefreqs_" + std::to_string(::getpid()) + ".gguf";
  const int half = parts->config.head_dim / 2;
  WriteGguf(path, *parts, false, 3, {{"rope_freqs.weight", std::vector<float>(half, 1.0f)}});
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("rope_freqs.weight"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("frequency factors"), std::string::npos) << m.status();
  WriteGguf(path, *parts, false, 3, {{"blk.0.attn_sinks.weight", std::vector<float>(4, 0.0f)}});
  m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.attn_sinks.weight"), std::string::npos) << m.status();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ragkv::model
