// The xchunk instrument checkpoint (models/xchunk.gguf, docs/xchunk.md)
// against llama.cpp: the pinned llama.cpp loads the file the trainer wrote
// and computes what ragkv computes (f32 KV in both: logits within 1e-3, as
// for stories260K in gguf_oracle_test.cc), and answers the task's held-out
// prompts as well under full prefill.
#include <algorithm>
#include <filesystem>
#include <vector>

#include "blend/xchunk_task.h"
#include "gtest/gtest.h"
#include "model/loader.h"
#include "tests/llamacpp/compare_util.h"
#include "tests/support/llamacpp_oracle.h"

namespace ragkv::model {
namespace {

TEST(XchunkOracleTest, LlamaCppComputesWhatRagkvComputesAndAnswers) {
  const std::string path = blend::XchunkModelPath();
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is part of the tree";
  auto ours = LoadModel(path, {.kv_dtype = kernels::DType::kF32});
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ((*ours)->config().vocab_size, blend::kXchunkVocab);
  auto theirs = ::ragkv::testing::LlamaCppModel::Load(path, {.n_ctx = 256, .kv_f32 = true});
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  constexpr int kPrompts = 20;
  int right = 0;
  for (int i = 0; i < kPrompts; ++i) {
    auto p = blend::MakeXchunkPrompt(/*seed=*/11, i, 32, 4);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<int32_t> toks = p->prefix;
    for (const auto& c : p->chunks) toks.insert(toks.end(), c.begin(), c.end());
    toks.insert(toks.end(), p->query.begin(), p->query.end());
    auto want = (*theirs)->Logits(toks, /*all=*/true);
    ASSERT_TRUE(want.ok()) << want.status();
    const testing::Agreement g =
        testing::CompareLogits(testing::RagkvLogits(**ours, toks), *want, blend::kXchunkVocab);
    EXPECT_LT(g.max_abs, 1e-3) << "prompt " << i << ", range " << g.range;
    EXPECT_EQ(g.top1, 1.0) << "prompt " << i;
    const float* last = want->data() + (toks.size() - 1) * blend::kXchunkVocab;
    right += model::Argmax(last, blend::kXchunkVocab) == p->answer;
  }
  EXPECT_GE(right, kPrompts * 9 / 10);
}

}  // namespace
}  // namespace ragkv::model
