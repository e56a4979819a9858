// Planner architectures from GGUF headers written by the project's GGUF
// writer (tests/support/gguf_writer.h): a qwen3moe and a Mixtral-style llama
// header with the published shapes equal the hand-written presets; MLA and
// sliding-window keys; tensor infos without data (a file the runtime cannot
// run) are enough; malformed files are refused by name.
#include "blend/plan_gguf.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/blend/plan_test_util.h"
#include "tests/support/gguf_writer.h"

namespace ragkv::blend {
namespace {

using ::ragkv::blend::testing::Preset;
using ::ragkv::testing::GgufWriter;

// SameShape: every field but name and source.
void ExpectSameShape(const ModelArch& x, const ModelArch& y) {
  EXPECT_EQ(x.layers, y.layers);
  EXPECT_EQ(x.dim, y.dim);
  EXPECT_EQ(x.heads, y.heads);
  EXPECT_EQ(x.kv_heads, y.kv_heads);
  EXPECT_EQ(x.head_dim, y.head_dim);
  EXPECT_EQ(x.vocab, y.vocab);
  EXPECT_EQ(x.experts, y.experts);
  EXPECT_EQ(x.experts_active, y.experts_active);
  EXPECT_EQ(x.expert_ffn, y.expert_ffn);
  EXPECT_EQ(x.shared_experts, y.shared_experts);
  EXPECT_EQ(x.shared_expert_ffn, y.shared_expert_ffn);
  EXPECT_EQ(x.first_dense_layers, y.first_dense_layers);
  EXPECT_EQ(x.kv_lora_rank, y.kv_lora_rank);
  EXPECT_EQ(x.sliding_window, y.sliding_window);
  EXPECT_EQ(x.global_every, y.global_every);
  EXPECT_EQ(x.full_attention_every, y.full_attention_every);
  EXPECT_DOUBLE_EQ(x.weight_bytes, y.weight_bytes);
  EXPECT_DOUBLE_EQ(x.expert_weight_bytes, y.expert_weight_bytes);
  EXPECT_DOUBLE_EQ(WeightBytes(x), WeightBytes(y));
  EXPECT_DOUBLE_EQ(KvBytes(x, 1000), KvBytes(y, 1000));
}

void Common(GgufWriter* g, const std::string& arch, int layers, int dim, int heads, int kv,
            int head_dim, int ffn) {
  g->KvStr("general.architecture", arch);
  g->KvU32(arch + ".block_count", layers);
  g->KvU32(arch + ".embedding_length", dim);
  g->KvU32(arch + ".feed_forward_length", ffn);
  g->KvU32(arch + ".attention.head_count", heads);
  g->KvU32(arch + ".attention.head_count_kv", kv);
  g->KvU32(arch + ".attention.key_length", head_dim);
  g->KvU32(arch + ".attention.value_length", head_dim);
}

// Tensor infos only (no data): what the header reader needs for the vocabulary
// and the bytes per weight; the runtime could not load this file.
void F16Infos(GgufWriter* g, uint64_t dim, uint64_t vocab, uint64_t expert_ffn, uint64_t experts) {
  g->Tensor("token_embd.weight", {dim, vocab}, {}, true);
  g->Tensor("blk.0.attn_q.weight", {dim, dim}, {}, true);
  g->Tensor("blk.0.ffn_gate_exps.weight", {dim, expert_ffn, experts}, {}, true);
}

std::string Path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

// WriteAndRead: writes g to the temp file `name` and reads its header back.
absl::StatusOr<ModelArch> WriteAndRead(const GgufWriter& g, const std::string& name) {
  g.Write(Path(name));
  return ArchFromGgufHeader(Path(name));
}

// FileBytes: the whole temp file `name`.
std::string FileBytes(const std::string& name) {
  std::ifstream f(Path(name), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(PlanGguf, Qwen3MoeHeaderEqualsThePreset) {
  GgufWriter g;
  Common(&g, "qwen3moe", 48, 2048, 32, 4, 128, 6144);
  g.KvU32("qwen3moe.expert_count", 128);
  g.KvU32("qwen3moe.expert_used_count", 8);
  g.KvU32("qwen3moe.expert_feed_forward_length", 768);
  g.KvF32("qwen3moe.rope.freq_base", 1e6f);
  g.KvStrs("tokenizer.ggml.tokens", {"a", "b"});  // the embedding's rows win
  F16Infos(&g, 2048, 151936, 768, 128);
  absl::StatusOr<ModelArch> a = WriteAndRead(g, "qwen3moe.gguf");
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectSameShape(*a, Preset("qwen3-30b-a3b"));
  EXPECT_EQ(a->ffn, 6144);
}

// Mixtral ships as architecture "llama" with expert_count; the experts'
// width is feed_forward_length. No tensor infos: bf16 assumed, vocab from
// the tokenizer.
TEST(PlanGguf, MixtralLlamaHeaderEqualsThePreset) {
  GgufWriter g;
  Common(&g, "llama", 32, 4096, 32, 8, 128, 14336);
  g.KvU32("llama.expert_count", 8);
  g.KvU32("llama.expert_used_count", 2);
  g.KvU32("llama.vocab_size", 32000);
  absl::StatusOr<ModelArch> a = WriteAndRead(g, "mixtral.gguf");
  ASSERT_TRUE(a.ok()) << a.status();
  ExpectSameShape(*a, Preset("mixtral-8x7b"));
}

TEST(PlanGguf, MlaAndSlidingKeys) {
  GgufWriter g;
  Common(&g, "deepseek2", 61, 7168, 128, 128, 192, 18432);
  g.KvU32("deepseek2.attention.value_length", 128);
  g.KvU32("deepseek2.attention.q_lora_rank", 1536);
  g.KvU32("deepseek2.attention.kv_lora_rank", 512);
  g.KvU32("deepseek2.rope.dimension_count", 64);
  g.KvU32("deepseek2.expert_count", 256);
  g.KvU32("deepseek2.expert_used_count", 8);
  g.KvU32("deepseek2.expert_feed_forward_length", 2048);
  g.KvU32("deepseek2.expert_shared_count", 1);
  g.KvU32("deepseek2.leading_dense_block_count", 3);
  g.KvU32("deepseek2.vocab_size", 129280);
  absl::StatusOr<ModelArch> a = WriteAndRead(g, "ds.gguf");
  ASSERT_TRUE(a.ok()) << a.status();
  ModelArch p = Preset("deepseek-v3");  // the preset is FP8; this header lists no tensors (bf16)
  p.weight_bytes = p.expert_weight_bytes = 2;
  ExpectSameShape(*a, p);
  EXPECT_EQ(a->qk_nope_dim, 128);
  EXPECT_EQ(a->qk_rope_dim, 64);
  EXPECT_EQ(a->v_head_dim, 128);
  EXPECT_EQ(a->q_lora_rank, 1536);

  GgufWriter s;
  Common(&s, "gemma3", 62, 5376, 32, 16, 128, 21504);
  s.KvU32("gemma3.attention.sliding_window", 1024);
  s.KvU32("gemma3.vocab_size", 262208);
  absl::StatusOr<ModelArch> gm = WriteAndRead(s, "gemma.gguf");
  ASSERT_TRUE(gm.ok()) << gm.status();
  ExpectSameShape(*gm, Preset("gemma-3-27b"));
}

TEST(PlanGguf, QuantisedTensorTypesGiveBytesPerWeight) {
  GgufWriter g;
  Common(&g, "llama", 2, 64, 4, 4, 16, 128);
  g.Write(Path("plain.gguf"));
  // Rewrite the tensor type of a one-tensor file to Q4_K (12): 144 / 256 B.
  GgufWriter q;
  Common(&q, "llama", 2, 64, 4, 4, 16, 128);
  q.Tensor("blk.0.attn_q.weight", {64, 64}, {}, false);
  q.Write(Path("q4k.gguf"));
  std::string bytes = FileBytes("q4k.gguf");
  const size_t at = bytes.find("blk.0.attn_q.weight") + 19 + 4 + 16;  // name, n_dims, dims
  ASSERT_LT(at + 4, bytes.size());
  const uint32_t q4k = 12;
  bytes.replace(at, 4, reinterpret_cast<const char*>(&q4k), 4);
  std::ofstream(Path("q4k.gguf"), std::ios::binary) << bytes;
  absl::StatusOr<ModelArch> a = ArchFromGgufHeader(Path("q4k.gguf"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_DOUBLE_EQ(a->weight_bytes, 144.0 / 256);
  absl::StatusOr<ModelArch> plain = ArchFromGgufHeader(Path("plain.gguf"));
  ASSERT_TRUE(plain.ok());
  EXPECT_DOUBLE_EQ(plain->weight_bytes, 2);
  EXPECT_EQ(plain->head_dim, 16);
}

TEST(PlanGguf, RefusesByName) {
  EXPECT_EQ(ArchFromGgufHeader(Path("absent.gguf")).status().code(),
            absl::StatusCode::kNotFound);
  std::ofstream(Path("junk.gguf"), std::ios::binary) << "NOTGGUF-and-some-bytes";
  absl::StatusOr<ModelArch> junk = ArchFromGgufHeader(Path("junk.gguf"));
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(junk.status().message().find("magic"), std::string::npos);
  GgufWriter g;
  Common(&g, "llama", 2, 64, 4, 4, 16, 128);
  g.Write(Path("whole.gguf"));
  const std::string bytes = FileBytes("whole.gguf");
  std::ofstream(Path("cut.gguf"), std::ios::binary) << bytes.substr(0, bytes.size() - 40);
  absl::StatusOr<ModelArch> cut = ArchFromGgufHeader(Path("cut.gguf"));
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status();
  GgufWriter none;
  none.KvStr("general.architecture", "llama");
  none.Write(Path("nokeys.gguf"));
  EXPECT_NE(ArchFromGgufHeader(Path("nokeys.gguf")).status().message().find("block_count"),
            std::string::npos);
}

}  // namespace
}  // namespace ragkv::blend
