// Hugging Face checkpoints: the test writes stories260K's weights as an HF
// LlamaForCausalLM directory (config.json + safetensors, single or sharded,
// F32/F16/BF16, q/k rows permuted for half-split RoPE as HF's conversion
// script does) and checks the loaded model against the .bin and .gguf.
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kernels/convert.h"
#include "model/loader.h"
#include "model/sampler.h"
#include "tests/model/test_util.h"

namespace ragkv::model {
namespace {

namespace fs = std::filesystem;
using ::ragkv::model::testing::ModelFile;
using nlohmann::json;

// HfPermute: HF's convert_llama_weights_to_hf permute(): within each head,
// row 2j+i (interleaved pair j, element i) moves to row i*hd/2 + j.
std::vector<float> HfPermute(const std::vector<float>& w, int heads, int hd, int in) {
  std::vector<float> out(w.size());
  for (int h = 0; h < heads; ++h)
    for (int j = 0; j < hd / 2; ++j)
      for (int i = 0; i < 2; ++i)
        std::copy_n(w.data() + (size_t(h) * hd + 2 * j + i) * in, in,
                    out.data() + (size_t(h) * hd + i * hd / 2 + j) * in);
  return out;
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  const std::vector<float>* data;
};

void WriteSafetensors(const std::string& path, const std::vector<Tensor>& ts, const std::string& dtype) {
  json h = json::object();
  std::string blob;
  for (const Tensor& t : ts) {
    std::string bytes;
    if (dtype == "F32") {
      bytes.assign(reinterpret_cast<const char*>(t.data->data()), t.data->size() * 4);
    } else {
      bytes.resize(t.data->size() * 2);
      for (size_t i = 0; i < t.data->size(); ++i) {
        uint16_t v = dtype == "F16" ? kernels::FloatToHalf((*t.data)[i]) : kernels::FloatToBf16((*t.data)[i]);
        std::memcpy(&bytes[i * 2], &v, 2);
      }
    }
    h[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {blob.size(), blob.size() + bytes.size()}}};
    blob += bytes;
  }
  h["__metadata__"] = {{"format", "pt"}};
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  std::ofstream o(path, std::ios::binary);
  uint64_t n = hs.size();
  o.write(reinterpret_cast<const char*>(&n), 8);
  o << hs << blob;
}

// WriteHfDir: stories260K as an HF directory; `shards` 1 or 2.
void WriteHfDir(const std::string& dir, const ModelParts& p, const std::string& dtype, int shards) {
  fs::create_directories(dir);
  const ModelConfig& c = p.config;
  const ModelWeights& w = p.weights;
  json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
              {"hidden_size", c.dim}, {"intermediate_size", c.hidden_dim},
              {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
              {"num_key_value_heads", c.n_kv_heads}, {"vocab_size", c.vocab_size},
              {"max_position_embeddings", c.max_seq_len}, {"rms_norm_eps", c.norm_eps},
              {"rope_theta", c.rope_theta}, {"tie_word_embeddings", c.shared_classifier},
              {"rope_scaling", nullptr}, {"torch_dtype", "float32"}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  static std::vector<std::vector<float>> keep;  // permuted copies outlive the writer
  keep.clear();
  keep.reserve(4 * c.n_layers);
  std::vector<Tensor> all;
  all.push_back({"model.embed_tokens.weight", {c.vocab_size, c.dim}, &w.tok_embeddings});
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    keep.push_back(HfPermute(L.wq, c.n_heads, c.head_dim, c.dim));
    all.push_back({pre + "self_attn.q_proj.weight", {c.q_dim(), c.dim}, &keep.back()});
    keep.push_back(HfPermute(L.wk, c.n_kv_heads, c.head_dim, c.dim));
    all.push_back({pre + "self_attn.k_proj.weight", {c.kv_dim(), c.dim}, &keep.back()});
    all.push_back({pre + "self_attn.v_proj.weight", {c.kv_dim(), c.dim}, &L.wv});
    all.push_back({pre + "self_attn.o_proj.weight", {c.dim, c.q_dim()}, &L.wo});
    all.push_back({pre + "input_layernorm.weight", {c.dim}, &L.attn_norm});
    all.push_back({pre + "post_attention_layernorm.weight", {c.dim}, &L.ffn_norm});
    all.push_back({pre + "mlp.gate_proj.weight", {c.hidden_dim, c.dim}, &L.w_gate});
    all.push_back({pre + "mlp.up_proj.weight", {c.hidden_dim, c.dim}, &L.w_up});
    all.push_back({pre + "mlp.down_proj.weight", {c.dim, c.hidden_dim}, &L.w_down});
  }
  all.push_back({"model.norm.weight", {c.dim}, &w.final_norm});
  if (shards == 1) {
    WriteSafetensors(dir + "/model.safetensors", all, dtype);
    return;
  }
  json map = json::object();
  std::vector<Tensor> a(all.begin(), all.begin() + all.size() / 2), b(all.begin() + all.size() / 2, all.end());
  WriteSafetensors(dir + "/model-00001-of-00002.safetensors", a, dtype);
  WriteSafetensors(dir + "/model-00002-of-00002.safetensors", b, dtype);
  for (const auto& t : a) map[t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) map[t.name] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << json{{"metadata", json::object()}, {"weight_map", map}}.dump();
}

std::vector<float> AllLogits(const Model& m, const std::vector<int32_t>& toks) {
  auto kv = m.NewCache(static_cast<int64_t>(toks.size()));
  Workspace ws;
  std::vector<float> l(toks.size() * m.config().vocab_size);
  EXPECT_TRUE(m.Prefill(toks, &*kv, &ws, LogitsMode::kAll, l.data()).ok());
  return l;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_MODEL_FILE("stories260K.bin");
    auto p = LoadModelParts(ModelFile("stories260K.bin"));
    ASSERT_TRUE(p.ok()) << p.status();
    parts_ = *std::move(p);
    auto m = LoadModel(ModelFile("stories260K.bin"));
    ASSERT_TRUE(m.ok());
    bin_ = *std::move(m);
    tokens_ = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401};
    root_ = ::testing::TempDir() + "/ragkv_hf_" + std::to_string(::getpid());
  }
  void TearDown() override { fs::remove_all(root_); }
  ModelParts parts_;
  std::unique_ptr<Model> bin_;
  std::vector<int32_t> tokens_;
  std::string root_;
};

TEST_F(SafetensorsTest, F32SingleAndShardedMatchBinAndGguf) {
  const auto want = AllLogits(*bin_, tokens_);
  for (int shards : {1, 2}) {
    const std::string dir = root_ + "/f32_" + std::to_string(shards);
    WriteHfDir(dir, parts_, "F32", shards);
    for (const std::string& path : {dir, dir + "/config.json"}) {
      auto m = LoadModel(path);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ((*m)->config().rope_layout, kernels::RopeLayout::kHalfSplit);
      EXPECT_TRUE((*m)->config().shared_classifier);
      const auto got = AllLogits(**m, tokens_);
      double err = 0;
      for (size_t i = 0; i < got.size(); ++i) err = std::max(err, double(std::abs(got[i] - want[i])));
      EXPECT_LT(err, 1e-4) << "shards " << shards;
      // Different RoPE layout of the stored weights -> different fingerprint.
      EXPECT_NE((*m)->fingerprint(), bin_->fingerprint());
    }
  }
  if (::ragkv::model::testing::HaveModelFile("stories260K.gguf")) {
    auto g = LoadModel(ModelFile("stories260K.gguf"));
    ASSERT_TRUE(g.ok());
    const auto got = AllLogits(**g, tokens_);
    double err = 0;
    for (size_t i = 0; i < got.size(); ++i) err = std::max(err, double(std::abs(got[i] - want[i])));
    EXPECT_LT(err, 1e-4);
  }
}

TEST_F(SafetensorsTest, ExportedKeysAreTheHfLayout) {
  // An engine running the HF checkpoint caches K in half-split order: each
  // head's keys are the interleaved keys with the pair elements regrouped.
  const std::string dir = root_ + "/layout";
  WriteHfDir(dir, parts_, "F32", 1);
  auto hf = LoadModel(dir);
  ASSERT_TRUE(hf.ok());
  const ModelConfig& c = bin_->config();
  const int n = static_cast<int>(tokens_.size());
  auto a = bin_->NewCache(n);
  auto b = (*hf)->NewCache(n);
  Workspace ws;
  ASSERT_TRUE(bin_->Prefill(tokens_, &*a, &ws, LogitsMode::kNone, nullptr).ok());
  ASSERT_TRUE((*hf)->Prefill(tokens_, &*b, &ws, LogitsMode::kNone, nullptr).ok());
  const size_t e = size_t(c.n_kv_heads) * n * c.head_dim;
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<float> ka(e), va(e), kb(e), vb(e);
    ASSERT_TRUE(a->ExportLayer(l, 0, n, kernels::DType::kF32, ka.data(), va.data()).ok());
    ASSERT_TRUE(b->ExportLayer(l, 0, n, kernels::DType::kF32, kb.data(), vb.data()).ok());
    const int hd = c.head_dim;
    for (size_t row = 0; row < size_t(c.n_kv_heads) * n; ++row) {
      for (int j = 0; j < hd / 2; ++j) {
        for (int i = 0; i < 2; ++i) {
          ASSERT_NEAR(kb[row * hd + i * hd / 2 + j], ka[row * hd + 2 * j + i], 1e-4);
        }
      }
      for (int d = 0; d < hd; ++d) ASSERT_NEAR(vb[row * hd + d], va[row * hd + d], 1e-4);
    }
  }
}

TEST_F(SafetensorsTest, HalfPrecisionCheckpointsLoad) {
  const auto want = AllLogits(*bin_, tokens_);
  for (const char* dtype : {"F16", "BF16"}) {
    const std::string dir = root_ + "/" + dtype;
    WriteHfDir(dir, parts_, dtype, 2);
    auto m = LoadModel(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    const auto got = AllLogits(**m, tokens_);
    // Rounded weights: logits move by ~1e-2 (f16) / ~1e-1 (bf16); greedy
    // choices stay.
    const int v = bin_->config().vocab_size;
    int agree = 0;
    for (size_t t = 0; t < tokens_.size(); ++t) {
      agree += Argmax(got.data() + t * v, v) == Argmax(want.data() + t * v, v);
    }
    EXPECT_GE(agree, int(tokens_.size()) - 1) << dtype;
    double err = 0;
    for (size_t i = 0; i < got.size(); ++i) err = std::max(err, double(std::abs(got[i] - want[i])));
    EXPECT_LT(err, std::string(dtype) == "F16" ? 0.05 : 0.5) << dtype;
  }
}

TEST_F(SafetensorsTest, Qwen2WithQkvBiasLoads) {
  // A Qwen2-style checkpoint (q/k/v biases, untied lm_head) written from
  // in-memory weights; the loaded model must equal Model::Create on them.
  ModelParts p = parts_;
  ModelConfig& c = p.config;
  c.arch = "qwen2";
  c.qkv_bias = true;
  c.rope_layout = kernels::RopeLayout::kHalfSplit;
  c.shared_classifier = false;
  p.weights.classifier = p.weights.tok_embeddings;
  for (size_t i = 0; i < p.weights.classifier.size(); ++i) p.weights.classifier[i] *= 0.5f;
  for (auto& L : p.weights.layers) {
    L.bq.resize(c.q_dim());
    L.bk.resize(c.kv_dim());
    L.bv.resize(c.kv_dim());
    for (auto* b : {&L.bq, &L.bk, &L.bv}) {
      for (size_t i = 0; i < b->size(); ++i) (*b)[i] = 0.05f * float(int(i % 7) - 3);
    }
  }
  const std::string dir = root_ + "/qwen2";
  fs::create_directories(dir);
  json cfg = {{"architectures", {"Qwen2ForCausalLM"}}, {"hidden_size", c.dim},
              {"intermediate_size", c.hidden_dim}, {"num_hidden_layers", c.n_layers},
              {"num_attention_heads", c.n_heads}, {"num_key_value_heads", c.n_kv_heads},
              {"vocab_size", c.vocab_size}, {"max_position_embeddings", 512},
              {"rms_norm_eps", c.norm_eps}, {"rope_theta", 1000000.0},
              {"tie_word_embeddings", false}, {"use_sliding_window", false},
              {"sliding_window", 64}};
  std::ofstream(dir + "/config.json") << cfg.dump();
  c.rope_theta = 1000000.0f;
  const ModelWeights& w = p.weights;
  std::vector<Tensor> ts;
  ts.push_back({"model.embed_tokens.weight", {c.vocab_size, c.dim}, &w.tok_embeddings});
  ts.push_back({"lm_head.weight", {c.vocab_size, c.dim}, &w.classifier});
  ts.push_back({"model.norm.weight", {c.dim}, &w.final_norm});
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    ts.push_back({pre + "self_attn.q_proj.weight", {c.q_dim(), c.dim}, &L.wq});
    ts.push_back({pre + "self_attn.q_proj.bias", {c.q_dim()}, &L.bq});
    ts.push_back({pre + "self_attn.k_proj.weight", {c.kv_dim(), c.dim}, &L.wk});
    ts.push_back({pre + "self_attn.k_proj.bias", {c.kv_dim()}, &L.bk});
    ts.push_back({pre + "self_attn.v_proj.weight", {c.kv_dim(), c.dim}, &L.wv});
    ts.push_back({pre + "self_attn.v_proj.bias", {c.kv_dim()}, &L.bv});
    ts.push_back({pre + "self_attn.o_proj.weight", {c.dim, c.q_dim()}, &L.wo});
    ts.push_back({pre + "input_layernorm.weight", {c.dim}, &L.attn_norm});
    ts.push_back({pre + "post_attention_layernorm.weight", {c.dim}, &L.ffn_norm});
    ts.push_back({pre + "mlp.gate_proj.weight", {c.hidden_dim, c.dim}, &L.w_gate});
    ts.push_back({pre + "mlp.up_proj.weight", {c.hidden_dim, c.dim}, &L.w_up});
    ts.push_back({pre + "mlp.down_proj.weight", {c.dim, c.hidden_dim}, &L.w_down});
  }
  WriteSafetensors(dir + "/model.safetensors", ts, "F32");
  auto loaded = LoadModel(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const ModelConfig& lc = (*loaded)->config();
  EXPECT_EQ(lc.arch, "qwen2");
  EXPECT_TRUE(lc.qkv_bias);
  EXPECT_FALSE(lc.shared_classifier);
  EXPECT_EQ(lc.max_seq_len, 512);  // sliding window not in use
  EXPECT_FLOAT_EQ(lc.rope_theta, 1e6f);
  c.max_seq_len = 512;
  auto direct = Model::Create(c, p.weights);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ((*loaded)->fingerprint(), (*direct)->fingerprint());
  // The loaded model multiplies by the file's matrices (q, k, v apart), the
  // direct one by a fused f32 [q|k|v]: other GEMM shapes, so last-ulp
  // differences (logits are O(10)).
  const auto a = AllLogits(**loaded, tokens_), b = AllLogits(**direct, tokens_);
  ASSERT_EQ(a.size(), b.size());
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, double(std::abs(a[i] - b[i])));
  EXPECT_LT(err, 1e-4);
}

// rope_scaling as Llama-3.1/3.2 ship it: "llama3" becomes per-pair divisors
// (compared with Meta's recipe written out here: wavelength bands), "linear"
// a position scale; other types are refused by name. The divisors themselves
// are the RoPE that tests/llamacpp checks against llama.cpp (rope_freqs).
TEST_F(SafetensorsTest, RopeScalingLlama3AndLinear) {
  const std::string dir = root_ + "/scaling";
  WriteHfDir(dir, parts_, "F32", 1);
  auto set_scaling = [&](const json& rs) {
    json cfg;
    std::ifstream(dir + "/config.json") >> cfg;
    cfg["rope_scaling"] = rs;
    std::ofstream(dir + "/config.json") << cfg.dump(2);
  };
  set_scaling({{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
               {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}});
  auto m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.rope_scaling, "llama3");
  ASSERT_EQ(c.rope_freq_factors.size(), size_t(c.head_dim / 2));
  for (int j = 0; j < c.head_dim / 2; ++j) {
    const double wavelen = 2 * M_PI * std::pow(double(c.rope_theta), 2.0 * j / c.head_dim);
    double want;
    if (wavelen < 64 / 4.0) {
      want = 1;
    } else if (wavelen > 64 / 1.0) {
      want = 8;
    } else {
      const double t = (64 / wavelen - 1) / (4 - 1);
      want = 1 / ((1 - t) / 8 + t);
    }
    EXPECT_NEAR(c.rope_freq_factors[j], want, 1e-5 * want) << j;
  }
  EXPECT_NE((*m)->fingerprint(), bin_->fingerprint());
  const std::vector<int32_t> toks = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
  const auto scaled = AllLogits(**m, toks), plain = AllLogits(*bin_, toks);
  double diff = 0;
  for (size_t i = 0; i < scaled.size(); ++i) diff = std::max(diff, double(std::abs(scaled[i] - plain[i])));
  EXPECT_GT(diff, 1e-2);  // the factors change the math

  set_scaling({{"type", "linear"}, {"factor", 2.0}});
  m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().rope_scaling, "linear");
  EXPECT_FLOAT_EQ((*m)->config().rope_freq_scale, 0.5f);

  set_scaling({{"rope_type", "dynamic"}, {"factor", 4.0}});
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("dynamic"), std::string::npos) << m.status();
  set_scaling({{"rope_type", "llama3"}, {"factor", 8.0}});
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("low_freq_factor"), std::string::npos) << m.status();
}

// rope_scaling "yarn" (Qwen2.5 long context): the divisors equal
// transformers' recipe written out here (interpolated / extrapolated
// inverse frequencies mixed by a linear ramp between the correction dims),
// the magnitude is 0.1 ln(factor) + 1 unless attention_factor or mscale /
// mscale_all_dim say otherwise; truncate = false and partial rotary are
// refused. The same divisors and magnitude are what tests/llamacpp checks
// against llama.cpp on GGUF files (qwen2_yarn, qwen3_yarn).
TEST_F(SafetensorsTest, RopeScalingYarn) {
  const std::string dir = root_ + "/yarn";
  WriteHfDir(dir, parts_, "F32", 1);
  json base_cfg;
  std::ifstream(dir + "/config.json") >> base_cfg;
  auto set_cfg = [&](const json& rs, const json& extra = json::object()) {
    json cfg = base_cfg;
    cfg["rope_scaling"] = rs;
    for (auto it = extra.begin(); it != extra.end(); ++it) cfg[it.key()] = it.value();
    std::ofstream(dir + "/config.json") << cfg.dump(2);
  };
  set_cfg({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 4096}});
  auto m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.rope_scaling, "yarn");
  const int dim = c.head_dim;
  auto corr = [&](double rot) {
    return dim * std::log(4096 / (rot * 2 * M_PI)) / (2 * std::log(double(c.rope_theta)));
  };
  const double low = std::max(0.0, std::floor(corr(32))), high = std::min(dim - 1.0, std::ceil(corr(1)));
  ASSERT_EQ(c.rope_freq_factors.size(), size_t(dim / 2));
  int interpolated = 0, extrapolated = 0;
  for (int j = 0; j < dim / 2; ++j) {
    const double extrap = 1.0 / std::pow(double(c.rope_theta), 2.0 * j / dim), interp = extrap / 4;
    const double ramp = std::clamp((j - low) / (high == low ? 0.001 : high - low), 0.0, 1.0);
    const double extrap_share = 1 - ramp;
    const double inv_freq = interp * (1 - extrap_share) + extrap * extrap_share;
    EXPECT_NEAR(c.rope_freq_factors[j], extrap / inv_freq, 1e-5) << j;
    interpolated += c.rope_freq_factors[j] > 3.99f;
    extrapolated += c.rope_freq_factors[j] < 1.01f;
  }
  EXPECT_GT(interpolated, 0);  // the ramp is inside the head: both ends occur
  EXPECT_GT(extrapolated, 0);
  EXPECT_NEAR(c.rope_mscale, 0.1 * std::log(4.0) + 1, 1e-6);
  EXPECT_NE((*m)->fingerprint(), bin_->fingerprint());
  const auto scaled = AllLogits(**m, tokens_), plain = AllLogits(*bin_, tokens_);
  double diff = 0;
  for (size_t i = 0; i < scaled.size(); ++i) diff = std::max(diff, double(std::abs(scaled[i] - plain[i])));
  EXPECT_GT(diff, 1e-2);

  set_cfg({{"type", "yarn"}, {"factor", 4.0}, {"attention_factor", 0.9}});
  m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FLOAT_EQ((*m)->config().rope_mscale, 0.9f);
  set_cfg({{"type", "yarn"}, {"factor", 4.0}, {"mscale", 2.0}, {"mscale_all_dim", 1.0}});
  m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR((*m)->config().rope_mscale, (0.2 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1), 1e-6);
  // mscale 0 is "unset" to transformers (a truthiness test): the default.
  set_cfg({{"type", "yarn"}, {"factor", 4.0}, {"mscale", 0.0}, {"mscale_all_dim", 0.0}});
  m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR((*m)->config().rope_mscale, 0.1 * std::log(4.0) + 1, 1e-6);
  set_cfg({{"type", "yarn"}, {"factor", 4.0}, {"truncate", false}});
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("truncate"), std::string::npos) << m.status();
  set_cfg({{"type", "yarn"}});
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("factor"), std::string::npos) << m.status();
  set_cfg(nullptr, {{"partial_rotary_factor", 0.5}});
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("partial_rotary_factor"), std::string::npos) << m.status();
}

TEST_F(SafetensorsTest, BadCheckpointsFailClearly) {
  const std::string dir = root_ + "/bad";
  WriteHfDir(dir, parts_, "F32", 1);
  // Truncated safetensors.
  const std::string st = dir + "/model.safetensors";
  fs::resize_file(st, fs::file_size(st) - 100);
  auto m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("truncated"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("model.safetensors"), std::string::npos) << m.status();
  // Unsupported architecture.
  WriteHfDir(dir, parts_, "F32", 1);
  {
    json cfg = json::parse(::ragkv::model::testing::ReadFile(dir + "/config.json"));
    cfg["architectures"] = {"GPT2LMHeadModel"};
    std::ofstream(dir + "/config.json") << cfg.dump();
  }
  m = LoadModel(dir);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << m.status();
  // Inconsistent dims.
  WriteHfDir(dir, parts_, "F32", 1);
  {
    json cfg = json::parse(::ragkv::model::testing::ReadFile(dir + "/config.json"));
    cfg["intermediate_size"] = 100;
    std::ofstream(dir + "/config.json") << cfg.dump();
  }
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("mlp.gate_proj.weight"), std::string::npos) << m.status();
  // Missing tensor (untied config without lm_head is treated as tied, so
  // drop a layer tensor instead via a bogus layer count).
  WriteHfDir(dir, parts_, "F32", 1);
  {
    json cfg = json::parse(::ragkv::model::testing::ReadFile(dir + "/config.json"));
    cfg["num_hidden_layers"] = 6;
    std::ofstream(dir + "/config.json") << cfg.dump();
  }
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("missing tensor model.layers.5"), std::string::npos) << m.status();
  // Unsupported dtype.
  WriteHfDir(dir, parts_, "F32", 1);
  {
    std::string bytes = ::ragkv::model::testing::ReadFile(st);
    const size_t p = bytes.find("\"F32\"");
    ASSERT_NE(p, std::string::npos);
    bytes.replace(p, 5, "\"I32\"");
    std::ofstream(st, std::ios::binary) << bytes;
  }
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << m.status();
  // Garbage header.
  std::ofstream(st, std::ios::binary) << "garbage garbage garbage";
  m = LoadModel(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(st), std::string::npos) << m.status();
}

}  // namespace
}  // namespace ragkv::model
