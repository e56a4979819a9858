// A model whose per-sequence state is not chunk-composable (issue 41's
// guard): a seeded random Mamba GGUF (recurrent state, llama.cpp's
// llama_model_is_recurrent) is refused for blending by name and served with
// llama.cpp's own full prefill by the real `ragkv serve --engine llama.cpp`,
// driven by the pinned OpenAI client; ragkv's runtime refuses the file by
// name too. Never approximate KV, never silently.
#include <cmath>
#include <random>

#include "absl/strings/match.h"
#include "engine/llamacpp/runtime.h"
#include "model/loader.h"
#include "tests/server/server_fixture.h"
#include "tests/support/gguf_writer.h"

namespace ragkv::server {
namespace {

// WriteRandomMamba: a 2-layer Mamba (d_model 64, inner 128, state 8, conv
// 4, dt rank 4) with the tiny test vocabulary, as llama.cpp's Mamba loader
// reads it (src/models/mamba.cpp).
void WriteRandomMamba(const std::string& path) {
  constexpr uint64_t d = 64, inner = 128, state = 8, conv = 4, rank = 4, vocab = 512;
  std::mt19937 rng(7);
  auto normal = [&rng](uint64_t n, float sd, float mean = 0) {
    std::normal_distribution<float> nd(mean, sd);
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  testing::GgufWriter w;
  w.KvStr("general.architecture", "mamba");
  w.KvU32("mamba.context_length", 4096);
  w.KvU32("mamba.embedding_length", d);
  w.KvU32("mamba.block_count", 2);
  w.KvU32("mamba.feed_forward_length", 0);
  w.KvU32("mamba.attention.head_count", 0);
  w.KvF32("mamba.attention.layer_norm_rms_epsilon", 1e-5f);
  w.KvU32("mamba.ssm.conv_kernel", conv);
  w.KvU32("mamba.ssm.inner_size", inner);
  w.KvU32("mamba.ssm.state_size", state);
  w.KvU32("mamba.ssm.time_step_rank", rank);
  testing::AddTinyLlamaVocab(&w, vocab);
  const float ws = 1.0f / std::sqrt(float(d));
  w.Tensor("token_embd.weight", {d, vocab}, normal(d * vocab, 1.0f), false);
  w.Tensor("output_norm.weight", {d}, normal(d, 0.1f, 1.0f), false);
  w.Tensor("output.weight", {d, vocab}, normal(d * vocab, 3 * ws), false);
  std::vector<float> a(state * inner);  // A = -exp(A_log): negative, per state
  for (uint64_t i = 0; i < a.size(); ++i) a[i] = -float(1 + i % state);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.Tensor(p + "attn_norm.weight", {d}, normal(d, 0.1f, 1.0f), false);
    w.Tensor(p + "ssm_in.weight", {d, 2 * inner}, normal(d * 2 * inner, ws), false);
    w.Tensor(p + "ssm_conv1d.weight", {conv, inner}, normal(conv * inner, 0.5f), false);
    w.Tensor(p + "ssm_conv1d.bias", {inner}, normal(inner, 0.1f), false);
    w.Tensor(p + "ssm_x.weight", {inner, rank + 2 * state},
             normal(inner * (rank + 2 * state), 1.0f / std::sqrt(float(inner))), false);
    w.Tensor(p + "ssm_dt.weight", {rank, inner}, normal(rank * inner, 0.5f), false);
    w.Tensor(p + "ssm_dt.bias", {inner}, normal(inner, 0.1f, -2.0f), false);
    w.Tensor(p + "ssm_a", {state, inner}, a, false);
    w.Tensor(p + "ssm_d", {inner}, normal(inner, 0.1f, 1.0f), false);
    w.Tensor(p + "ssm_out.weight", {inner, d}, normal(inner * d, 1.0f / std::sqrt(float(inner))),
             false);
  }
  w.Write(path);
}

class NonComposableServerTest : public OpenAiServerTest {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(OpenAiDir() + "/node_modules/openai")) return;
    work_ = fs::temp_directory_path() / ("ragkv-mamba-" + std::to_string(::getpid()));
    fs::create_directories(work_ / "data");
    fs::create_symlink(OpenAiDir() + "/node_modules", work_ / "node_modules");
    fs::copy_file(std::string(RAGKV_SOURCE_DIR) + "/tests/server/openai_client.mjs",
                  work_ / "openai_client.mjs");
    WriteRandomMamba(Mamba());
    // The alias keeps the client's model name (kModelId).
    Spawn({"--parallel", "2", "--ctx-size", "1024", "--alias", kModelId}, "data", &pid_, &url_,
          nullptr, Mamba());
  }
  static std::string Mamba() { return (work_ / "mamba.gguf").string(); }
};

TEST_F(NonComposableServerTest, RecurrentModelIsServedWithFullPrefillAndTheRefusalNamed) {
  const Reference ref = Greedy(kMessages, 16, Mamba());
  ASSERT_FALSE(ref.output.empty());
  for (const std::string mode : {"", "cacheblend", "full"}) {
    const json r = Node("chat", ChatBody(mode, 16));
    ASSERT_TRUE(r.contains("ragkv")) << r;
    const json& x = r["ragkv"];
    ASSERT_TRUE(x["blend_refused"].is_string()) << x;
    EXPECT_TRUE(absl::StrContains(x["blend_refused"].get<std::string>(), "'mamba'")) << x;
    EXPECT_TRUE(absl::StrContains(x["blend_refused"].get<std::string>(), "recurrent")) << x;
    // llama.cpp's own prefill of every token, nothing handed over, no fallback.
    EXPECT_EQ(x["handed_over_tokens"], 0) << mode;
    EXPECT_TRUE(x["fallback"].is_null()) << x;
    EXPECT_EQ(Ids(x["prompt_token_ids"]), ref.prompt) << mode;
    ExpectSameUpToNearTie(ref, Ids(x["output_token_ids"]));
  }
}

TEST_F(NonComposableServerTest, RagkvsRuntimeAndTheProbeNameTheArchitecture) {
  auto why = engine::llamacpp::BlendRefusal(Mamba());
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_TRUE(absl::StrContains(*why, "'mamba'")) << *why;
  auto none = engine::llamacpp::BlendRefusal(ModelPath());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, "");  // an attention-only model is blended
  auto m = model::LoadModel(Mamba());
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "'mamba'")) << m.status();
  EXPECT_TRUE(absl::StrContains(m.status().message(), "not chunk-composable")) << m.status();
}

}  // namespace
}  // namespace ragkv::server
