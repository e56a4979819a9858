// llama_engine_test.cc: LlamaCppEngine against a real `ragkv serve` on
// loopback and the real llama.cpp (issue 18): the fused KV of a full
// recompute (r = 1.0) handed to llama.cpp gives llama.cpp's own next-token
// logits and greedy continuation; a sidecar that is down, or one serving
// another model, makes llama.cpp prefill by itself, with the same answer.
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/llamacpp/llama_engine.h"
#include "gtest/gtest.h"
#include "llama.h"
#include "model/loader.h"
#include "tests/integration/serve_process.h"
#include "tests/llamacpp/compare_util.h"
#include "tests/model/test_util.h"
#include "tests/support/llamacpp_oracle.h"

namespace ragkv::model::testing {
namespace {

namespace lc = ragkv::engine::llamacpp;
using ragkv::testing::LlamaCppModel;
using ragkv::testing::ServeProcess;

// ScratchDir: a temp directory, removed with its contents.
struct ScratchDir {
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "ragkv-llama-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string path_;
};

class LlamaCppEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ModelFile("stories260K.gguf");
    if (!HaveModelFile("stories260K.gguf")) GTEST_SKIP() << "no " << path_;
    auto m = LoadModel(path_);
    ASSERT_TRUE(m.ok()) << m.status();
    fp_.assign((*m)->fingerprint().begin(), (*m)->fingerprint().end());
    vocab_ = (*m)->config().vocab_size;
    auto ref = LlamaCppModel::Load(path_, {});
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref_ = std::move(*ref);
    for (int i = 0; i < 40; ++i) prompt_.push_back(1 + (i * 53) % (vocab_ - 1));
    own_ = *ref_->Logits(prompt_, /*all=*/false);
    own_greedy_ = *ref_->Greedy(prompt_, 32);
  }
  // Request: the prompt as token segments (for a sidecar that is down: the
  // request never reaches one).
  v1::BlendRequest Request() const {
    v1::BlendRequest br;
    br.add_segments()->mutable_tokens()->mutable_ids()->Assign(prompt_.begin(), prompt_.begin() + 16);
    br.add_segments()->mutable_tokens()->mutable_ids()->Assign(prompt_.begin() + 16, prompt_.begin() + 32);
    br.add_segments()->mutable_tokens()->mutable_ids()->Assign(prompt_.begin() + 32, prompt_.end());
    br.mutable_options()->set_mode(v1::BLEND_MODE_FULL_PREFILL);
    br.mutable_options()->set_output_dtype(v1::DTYPE_F32);
    return br;
  }
  // FromChunks: ingests two short documents into the sidecar; the request
  // blends their chunks and an 8-token query; prompt_ and the references
  // become that prompt's.
  v1::BlendRequest FromChunks(Client* c) {
    std::vector<v1::Document> docs(2);
    docs[0].set_doc_id("a");
    docs[0].set_text("Once upon a time there was a little girl named Lily. She loved to play.");
    docs[1].set_doc_id("b");
    docs[1].set_text("One day a big dog came to the park and wanted to play with the ball.");
    auto ing = c->IngestDocuments(docs);
    EXPECT_TRUE(ing.ok()) << ing.status();
    std::vector<uint64_t> ids = {ing->ingested(0).chunk_ids(0), ing->ingested(1).chunk_ids(0)};
    auto chunks = c->GetChunks(ids);
    EXPECT_TRUE(chunks.ok()) << chunks.status();
    v1::BlendRequest br;
    prompt_.clear();
    for (int i = 0; i < 2; ++i) {
      br.add_segments()->set_chunk_id(ids[i]);
      prompt_.insert(prompt_.end(), chunks->chunks(i).token_ids().begin(),
                     chunks->chunks(i).token_ids().end());
    }
    const std::vector<int32_t> query = {30, 31, 32, 33, 34, 35, 36, 37};
    br.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
    prompt_.insert(prompt_.end(), query.begin(), query.end());
    br.mutable_options()->set_mode(v1::BLEND_MODE_FULL_PREFILL);
    br.mutable_options()->set_output_dtype(v1::DTYPE_F32);
    own_ = *ref_->Logits(prompt_, /*all=*/false);
    own_greedy_ = *ref_->Greedy(prompt_, 32);
    return br;
  }
  std::vector<int32_t> GreedyOn(std::vector<float> l) {
    std::vector<int32_t> out;
    for (int i = 0; i < 32; ++i) {
      llama_token best = static_cast<llama_token>(std::max_element(l.begin(), l.end()) - l.begin());
      out.push_back(best);
      EXPECT_EQ(llama_decode(ref_->context(), llama_batch_get_one(&best, 1)), 0);
      const float* p = llama_get_logits_ith(ref_->context(), -1);
      l.assign(p, p + vocab_);
    }
    return out;
  }

  std::string path_, fp_;
  int vocab_ = 0;
  std::unique_ptr<LlamaCppModel> ref_;
  std::vector<int32_t> prompt_, own_greedy_;
  std::vector<float> own_;
};

TEST_F(LlamaCppEngineTest, FusedKvFromTheSidecarGivesLlamaCppsOwnAnswer) {
  ScratchDir dir;
  auto server = ServeProcess::Start({"--data-dir", dir.path() + "/d", "--model", path_},
                                    dir.path() + "/serve.log");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = (*server)->NewClient();
  const v1::BlendRequest request = FromChunks(client.get());
  auto engine = lc::LlamaCppEngine::Create({ref_->context(), client.get(), fp_});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto r = (*engine)->Prefill(request, prompt_, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->fallback.empty()) << r->fallback;
  EXPECT_EQ(r->reused_tokens, static_cast<int>(prompt_.size()) - 1);
  EXPECT_EQ(r->prefilled_tokens, 1);
  const Agreement g = CompareLogits(r->logits, own_, vocab_);
  EXPECT_LT(g.max_abs, 0.01 * g.range) << "max |diff| " << g.max_abs << " of " << g.range;
  EXPECT_EQ(g.top1, 1.0);
  EXPECT_EQ(GreedyOn(r->logits), own_greedy_);
  EXPECT_EQ((*engine)->fallbacks(), 0);
}

TEST_F(LlamaCppEngineTest, ASidecarThatIsDownOrServesAnotherModelFallsBack) {
  ClientOptions co;
  co.target = absl::StrCat("127.0.0.1:", ragkv::testing::FreeLoopbackPort());  // nobody listens
  co.max_attempts = 1;
  auto down = Client::Create(co);
  ASSERT_TRUE(down.ok());
  auto engine = lc::LlamaCppEngine::Create({ref_->context(), down->get(), fp_, absl::Seconds(2)});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto r = (*engine)->Prefill(Request(), prompt_, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->fallback.empty());
  EXPECT_EQ(r->reused_tokens, 0);
  EXPECT_EQ(r->prefilled_tokens, static_cast<int>(prompt_.size()));
  const Agreement g = CompareLogits(r->logits, own_, vocab_);
  EXPECT_LE(g.max_abs, 1e-4 * g.range) << "the fallback is llama.cpp's own prefill";
  EXPECT_EQ(GreedyOn(r->logits), own_greedy_);
  EXPECT_EQ((*engine)->fallbacks(), 1);

  // A live sidecar whose model is not this file's: refused, prefilled here.
  ScratchDir dir;
  auto server = ServeProcess::Start({"--data-dir", dir.path() + "/d", "--model", path_},
                                    dir.path() + "/serve.log");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = (*server)->NewClient();
  const v1::BlendRequest request = FromChunks(client.get());
  std::string other = fp_;
  other[0] ^= 1;
  auto wrong = lc::LlamaCppEngine::Create({ref_->context(), client.get(), other});
  ASSERT_TRUE(wrong.ok());
  auto w = (*wrong)->Prefill(request, prompt_, 0);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_NE(w->fallback.find("fingerprint"), std::string::npos) << w->fallback;
  EXPECT_EQ(CompareLogits(w->logits, own_, vocab_).top1, 1.0);
}

}  // namespace
}  // namespace ragkv::model::testing
