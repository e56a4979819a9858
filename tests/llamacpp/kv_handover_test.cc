// kv_handover_test.cc: ragkv's K/V written into a real llama.cpp context
// through llama_state_seq_set_data (engine/llamacpp/, issue 18's first
// slice). ragkv prefills a prompt with its own runtime, hands the cache to
// llama.cpp, and llama.cpp decodes on from it: its next-token logits must
// equal llama.cpp's own full prefill of the same prompt within the f16
// cache's rounding, and greedy continuations must be identical, with V
// stored plainly (flash attention) and transposed (without).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/llamacpp/adapter.h"
#include "engine/llamacpp/seq_state.h"
#include "gtest/gtest.h"
#include "llama.h"
#include "model/kv_cache.h"
#include "model/loader.h"
#include "model/model.h"
#include "tests/llamacpp/compare_util.h"
#include "tests/support/random_model.h"
#include "tests/model/test_util.h"
#include "tests/support/llamacpp_oracle.h"
#include "tests/support/require.h"

namespace ragkv::model::testing {
namespace {

namespace lc = ragkv::engine::llamacpp;
using ragkv::testing::LlamaCppModel;

// RagkvKv: ragkv's prefill of `prompt`, each layer as [H][T][D] f32.
struct RagkvKv {
  std::vector<std::vector<float>> k, v;
  lc::SeqKv view;
};
RagkvKv PrefillKv(const Model& m, const std::vector<int32_t>& prompt) {
  const ModelConfig& c = m.config();
  auto cache = m.NewCache(static_cast<int64_t>(prompt.size()));
  Workspace ws;
  EXPECT_TRUE(m.Prefill(prompt, &*cache, &ws, LogitsMode::kNone, nullptr).ok());
  RagkvKv r;
  const size_t n = size_t(c.n_kv_heads) * prompt.size() * c.head_dim;
  r.k.assign(c.n_layers, std::vector<float>(n));
  r.v.assign(c.n_layers, std::vector<float>(n));
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_TRUE(cache->ExportLayer(l, 0, static_cast<int64_t>(prompt.size()), kernels::DType::kF32,
                                   r.k[l].data(), r.v[l].data())
                    .ok());
    r.view.k.push_back(r.k[l].data());
    r.view.v.push_back(r.v[l].data());
  }
  r.view.num_tokens = static_cast<int64_t>(prompt.size());
  r.view.n_kv_heads = c.n_kv_heads;
  r.view.head_dim = c.head_dim;
  return r;
}

// DecodeOne: llama.cpp decodes `tok` after what its memory holds; logits.
// UniformKv: `layers` layers of `tokens` tokens x 2 KV heads x head_dim 2,
// every layer pointing at one K buffer of 0.5 (*k) and one V buffer of -0.25
// (*v); k and v must outlive the result.
lc::SeqKv UniformKv(int layers, int tokens, std::vector<float>* k, std::vector<float>* v) {
  k->assign(2 * tokens * 2, 0.5f);
  v->assign(2 * tokens * 2, -0.25f);
  lc::SeqKv kv;
  kv.num_tokens = tokens;
  kv.n_kv_heads = 2;
  kv.head_dim = 2;
  kv.k.assign(layers, k->data());
  kv.v.assign(layers, v->data());
  return kv;
}

// RoundTripLayout: encodes kv under l (which must succeed), parses the
// blob's layout into *back, and checks the blob one byte short is refused.
void RoundTripLayout(const lc::SeqStateLayout& l, const lc::SeqKv& kv, lc::SeqStateLayout* back) {
  auto blob = lc::EncodeSeqState(l, 0, kv);
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto parsed = lc::ParseSeqStateLayout(*blob);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  *back = *parsed;
  EXPECT_FALSE(lc::ParseSeqStateLayout(blob->substr(0, blob->size() - 1)).ok());
}

std::vector<float> DecodeOne(llama_context* ctx, int32_t tok, int vocab) {
  llama_token t = tok;
  EXPECT_EQ(llama_decode(ctx, llama_batch_get_one(&t, 1)), 0);
  const float* l = llama_get_logits_ith(ctx, -1);
  return std::vector<float>(l, l + vocab);
}

// GreedyFrom: n greedy tokens decoded from `logits` (argmax, then decode it).
std::vector<int32_t> GreedyFrom(llama_context* ctx, std::vector<float> logits, int vocab, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(model::Argmax(logits.data(), vocab));
    logits = DecodeOne(ctx, out.back(), vocab);
  }
  return out;
}

class KvHandoverTest : public ::testing::TestWithParam<bool> {};

TEST_P(KvHandoverTest, LlamaCppDecodesFromRagkvKvAsFromItsOwnPrefill) {
  const std::string path = ModelFile("stories260K.gguf");
  RAGKV_REQUIRE_OR_SKIP(HaveModelFile("stories260K.gguf")) << "no " << path;
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status();
  LlamaCppModel::Options o;
  o.flash_attn = GetParam();
  auto ref = LlamaCppModel::Load(path, o);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int vocab = (*m)->config().vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 48; ++i) prompt.push_back(1 + (i * 37) % (vocab - 1));

  // llama.cpp's own: the logits after prompt + next, and 32 greedy tokens.
  std::vector<int32_t> with_next = prompt;
  with_next.push_back(prompt.back());
  auto own = (*ref)->Logits(with_next, /*all=*/false);
  ASSERT_TRUE(own.ok()) << own.status();
  auto own_greedy = (*ref)->Greedy(with_next, 32);
  ASSERT_TRUE(own_greedy.ok()) << own_greedy.status();

  // ragkv's KV of the prompt, handed over; llama.cpp decodes on from it.
  llama_context* ctx = (*ref)->context();
  auto layout = lc::ProbeLayout(ctx, (*m)->config());
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->v_trans, !GetParam()) << "flash attention stores V untransposed";
  RagkvKv kv = PrefillKv(**m, prompt);
  ASSERT_TRUE(lc::LoadSeqKv(ctx, 0, *layout, kv.view).ok());
  std::vector<float> l = DecodeOne(ctx, prompt.back(), vocab);
  const Agreement g = CompareLogits(l, *own, vocab);
  // Both caches are f16; ragkv's f32 K/V round to the same f16 grid as
  // llama.cpp's own up to f32 noise: the logits agree to 1% of their range.
  EXPECT_LT(g.max_abs, 0.01 * g.range) << "max |diff| " << g.max_abs << " of range " << g.range;
  EXPECT_EQ(g.top1, 1.0);
  EXPECT_EQ(GreedyFrom(ctx, std::move(l), vocab, 32), *own_greedy);
}

// Architectures beyond the dense llama block, each a seeded random-weight
// F32 file with f32 caches on both sides: Phi-3 (fused attn_qkv / ffn_up,
// NEOX RoPE), qwen3moe and Mixtral (mixture-of-experts FFN; routing is per
// token, so a prompt's KV composes as for a dense model). ragkv's full
// prefill (every row recomputed: blending at r = 1.0) handed to llama.cpp
// gives llama.cpp's own next-token logits (F32 tolerance of
// arch_oracle_test, 2e-3) and 32 greedy tokens. gemma3 (sliding-window
// layers): the two-section state, SWA layers handing over only their
// window's cells. For MoE the number of
// prompt positions where ragkv's router is within 1e-4 of a tie is printed
// (there the engines could route apart; see arch_oracle_test).
class KvHandoverArchTest : public ::testing::TestWithParam<ragkv::testing::Variant> {};

TEST_P(KvHandoverArchTest, LlamaCppDecodesFromRagkvKvAsFromItsOwnPrefill) {
  const ragkv::testing::Variant& v = GetParam();
  const std::string path = ::testing::TempDir() + "/ragkv_handover_" + v.name + ".gguf";
  ragkv::testing::WriteRandomModel(v, false, path);
  LoadOptions lo;
  lo.kv_dtype = kernels::DType::kF32;
  auto m = LoadModel(path, lo);
  ASSERT_TRUE(m.ok()) << m.status();
  auto ref = LlamaCppModel::Load(path, {.n_ctx = 256, .kv_f32 = true});
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int vocab = (*m)->config().vocab_size;
  std::vector<int32_t> prompt = {1};
  for (int i = 1; i < 40; ++i) prompt.push_back(3 + (i * 37) % (vocab - 3));
  std::vector<int32_t> with_next = prompt;
  with_next.push_back(prompt.back());
  if ((*m)->config().n_experts > 0) {
    const std::vector<float> gaps = RagkvRoutedRun(**m, with_next).min_gap;
    const long near = std::count_if(gaps.begin(), gaps.end(), [](float g) { return g < 1e-4f; });
    std::printf("%s handover: %ld of %zu positions near a router tie (gap < 1e-4)\n", v.name.c_str(),
                near, gaps.size());
  }
  auto own = (*ref)->Logits(with_next, /*all=*/false);
  ASSERT_TRUE(own.ok()) << own.status();
  auto own_greedy = (*ref)->Greedy(with_next, 32);
  ASSERT_TRUE(own_greedy.ok()) << own_greedy.status();
  llama_context* ctx = (*ref)->context();
  auto layout = lc::ProbeLayout(ctx, (*m)->config());
  ASSERT_TRUE(layout.ok()) << layout.status();
  RagkvKv kv = PrefillKv(**m, prompt);
  ASSERT_TRUE(lc::LoadSeqKv(ctx, 0, *layout, kv.view).ok());
  std::vector<float> l = DecodeOne(ctx, prompt.back(), vocab);
  const Agreement g = CompareLogits(l, *own, vocab);
  std::printf("%s handover: max |diff| %.6f of range %.2f\n", v.name.c_str(), g.max_abs, g.range);
  EXPECT_LT(g.max_abs, 2e-3);
  EXPECT_EQ(g.top1, 1.0);
  EXPECT_EQ(GreedyFrom(ctx, std::move(l), vocab, 32), *own_greedy);
  if ((*m)->config().sliding_window > 0) {
    // The handover blob has the shape of llama.cpp's own after prefilling
    // the prompt: two sections, the global layers' with every cell, the SWA
    // layers' with the last `window` (docs/gemma3.md section 3).
    llama_memory_clear(llama_get_memory(ctx), true);
    std::vector<llama_token> toks(prompt.begin(), prompt.end());
    ASSERT_EQ(llama_decode(ctx, llama_batch_get_one(toks.data(), static_cast<int32_t>(toks.size()))), 0);
    std::string theirs(llama_state_seq_get_size(ctx, 0), '\0');
    theirs.resize(llama_state_seq_get_data(ctx, reinterpret_cast<uint8_t*>(theirs.data()), theirs.size(), 0));
    auto ours = lc::EncodeSeqState(*layout, 0, kv.view);
    ASSERT_TRUE(ours.ok()) << ours.status();
    EXPECT_EQ(ours->size(), theirs.size());
    for (const std::string* b : {&theirs, &*ours}) {
      auto l = lc::ParseSeqStateLayout(*b);
      ASSERT_TRUE(l.ok()) << l.status();
      EXPECT_TRUE(l->two_sections);
      EXPECT_EQ(l->cells, prompt.size());
      EXPECT_EQ(l->cells_swa, static_cast<uint32_t>((*m)->config().sliding_window));
      EXPECT_EQ(l->n_layer_swa, layout->n_layer_swa);
    }
    auto l = lc::ParseSeqStateLayout(*ours);
    std::printf("%s handover: sections of %u and %u cells, %u of %u layers SWA\n", v.name.c_str(),
                l->cells, l->cells_swa, l->n_layer_swa, l->n_layer);
  }
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    Files, KvHandoverArchTest,
    ::testing::Values(
        ragkv::testing::Variant{.name = "phi3", .arch = "phi3", .sliding_window = 512},
        ragkv::testing::Variant{.name = "qwen3moe", .arch = "qwen3moe", .experts = 8, .experts_used = 2,
                                .expert_ffn = 256},
        ragkv::testing::Variant{.name = "mixtral", .arch = "llama", .experts = 4, .experts_used = 2},
        // gemma3, window 16 < the 40-token prompt: pattern 6 (7 layers,
        // layer 5 global) and pattern 2 with linear x8 on the global layer.
        ragkv::testing::Variant{.name = "gemma3", .arch = "gemma3", .sliding_window = 16, .layers = 7,
                                .tied = true},
        ragkv::testing::Variant{.name = "gemma3_p2_linear8", .arch = "gemma3", .linear_factor = 8.0f,
                                .sliding_window = 16,
                                .kv_u32 = {{"attention.sliding_window_pattern", 2}}, .layers = 3}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(FlashAttention, KvHandoverTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "VPlain" : "VTransposed"; });

// A two-section (sliding-window) layout: the global layers' section has
// every cell, the SWA layers' the last `window`; without the per-layer
// split it is refused.
TEST(SeqState, TwoSectionsRoundTrip) {
  lc::SeqStateLayout l;
  l.n_layer = 3;
  l.n_embd_k = l.n_embd_v = 4;
  l.two_sections = true;
  l.n_layer_swa = 2;
  std::vector<float> k, v;
  lc::SeqKv kv = UniformKv(3, 5, &k, &v);
  EXPECT_FALSE(lc::EncodeSeqState(l, 0, kv).ok());  // no window / swa_layers
  l.window = 2;
  l.swa_layers = {true, false, true};
  for (bool trans : {false, true}) {
    l.v_trans = trans;
    lc::SeqStateLayout back;
    ASSERT_NO_FATAL_FAILURE(RoundTripLayout(l, kv, &back));
    EXPECT_TRUE(back.two_sections);
    EXPECT_EQ(back.n_layer, 3u);
    EXPECT_EQ(back.n_layer_swa, 2u);
    EXPECT_EQ(back.cells, 5u);
    EXPECT_EQ(back.cells_swa, 2u);
  }
  l.swa_layers = {true, false, false};  // 1 SWA layer named, the state has 2
  EXPECT_FALSE(lc::EncodeSeqState(l, 0, kv).ok());
}

TEST(SeqState, RefusesWhatItCannotWriteAndRoundTripsItsLayout) {
  lc::SeqStateLayout l;
  l.n_layer = 2;
  l.n_embd_k = l.n_embd_v = 4;
  std::vector<float> k, v;
  lc::SeqKv kv = UniformKv(2, 3, &k, &v);
  for (bool trans : {false, true}) {
    l.v_trans = trans;
    lc::SeqStateLayout back;
    ASSERT_NO_FATAL_FAILURE(RoundTripLayout(l, kv, &back));
    EXPECT_EQ(back.n_layer, 2u);
    EXPECT_EQ(back.n_embd_k, 4u);
    EXPECT_EQ(back.v_trans, trans);
  }
  kv.head_dim = 3;  // 2 x 3 != 4
  EXPECT_TRUE(absl::IsInvalidArgument(lc::EncodeSeqState(l, 0, kv).status()));
  l.k_type = 8;  // Q8_0 cache
  kv.head_dim = 2;
  EXPECT_TRUE(absl::IsUnimplemented(lc::EncodeSeqState(l, 0, kv).status()));
}

}  // namespace
}  // namespace ragkv::model::testing
