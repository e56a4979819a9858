// safetensors_fuzzer: Hugging Face directory loading (config.json +
// model.safetensors: u64 header length, JSON tensor table, data offsets).
// Input: [u16 config_len][config.json][model.safetensors bytes], written to
// <scratch>/hf/ and loaded with LoadModelParts(dir).
// Seeds: a tiny valid 1-layer Llama written by this target when
// RAGKV_FUZZ_SEED_DIR is set (scripts/fuzz).
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "model/loader.h"

namespace {

std::string TinyLlamaSeed() {
  const int d = 8, h = 16, v = 16;
  const std::string config =
      R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":8,)"
      R"("intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,)"
      R"("num_key_value_heads":2,"vocab_size":16,"max_position_embeddings":32,)"
      R"("rms_norm_eps":1e-5,"rope_theta":10000.0,"tie_word_embeddings":true,"torch_dtype":"float32"})";
  const std::vector<std::pair<std::string, std::vector<int>>> tensors = {
      {"model.embed_tokens.weight", {v, d}},
      {"model.layers.0.input_layernorm.weight", {d}},
      {"model.layers.0.self_attn.q_proj.weight", {d, d}},
      {"model.layers.0.self_attn.k_proj.weight", {d, d}},
      {"model.layers.0.self_attn.v_proj.weight", {d, d}},
      {"model.layers.0.self_attn.o_proj.weight", {d, d}},
      {"model.layers.0.post_attention_layernorm.weight", {d}},
      {"model.layers.0.mlp.gate_proj.weight", {h, d}},
      {"model.layers.0.mlp.up_proj.weight", {h, d}},
      {"model.layers.0.mlp.down_proj.weight", {d, h}},
      {"model.norm.weight", {d}},
  };
  std::string header = "{";
  size_t off = 0;
  for (const auto& [name, shape] : tensors) {
    size_t n = 1;
    std::string s;
    for (int x : shape) {
      n *= static_cast<size_t>(x);
      if (!s.empty()) s += ',';  // piecewise: avoids GCC 12's false -Wrestrict
      s += std::to_string(x);
    }
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + s + "],\"data_offsets\":[" +
              std::to_string(off) + "," + std::to_string(off + 4 * n) + "]}";
    off += 4 * n;
  }
  header += "}";
  std::string st(8, '\0');
  const uint64_t hl = header.size();
  for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((hl >> (8 * i)) & 0xff);
  st += header;
  for (size_t i = 0; i < off / 4; ++i) {
    const float f = 0.01f * static_cast<float>(i % 17) - 0.05f;
    st.append(reinterpret_cast<const char*>(&f), 4);
  }
  return ragkv::fuzz::U16Prefixed(config) + st;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::string d = ragkv::fuzz::SeedDir(); !d.empty()) {
    ragkv::fuzz::WriteFile(d + "/tiny_llama", TinyLlamaSeed());
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string p = ragkv::fuzz::ScratchDir() + "/hf";
    std::filesystem::create_directories(p);
    return p;
  }();
  ragkv::fuzz::FuzzInput in(data, size);
  const std::string_view config = in.Take(in.U16());
  if (!ragkv::fuzz::WriteFile(dir + "/config.json", config) ||
      !ragkv::fuzz::WriteFile(dir + "/model.safetensors", in.Rest())) {
    return 0;
  }
  ragkv::model::LoadOptions opt;
  opt.max_seq_len = 32;
  (void)ragkv::model::LoadModelParts(dir, opt);
  return 0;
}
