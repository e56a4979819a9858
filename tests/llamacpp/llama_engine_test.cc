// llama_engine_test.cc: LlamaCppEngine against a real `ragkv serve` on
// loopback and the real llama.cpp (issue 18), on stories260K, on GQA
// llama, Phi-3, qwen3moe and Mixtral random-weight F16 files and on the llama one's Q8_0
// quantization (llama.cpp's own quantizer): the fused KV of a full recompute (r = 1.0), as explicit
// segments or as a raw prompt, handed to llama.cpp gives llama.cpp's own
// next-token logits and greedy continuation. Every fallback gives plain
// llama.cpp's answer: a sidecar down, another model's fingerprint, a fused
// prompt that agrees only up to a token, the sidecar killed mid-stream.
//
// Tolerance: the rows come from ragkv's f32 computation rounded to the f16
// cache, llama.cpp's own from its computation (f16 activations for F16
// weights, q8 activations for Q8_0). Max |diff| of the next-token logits,
// measured 2026-12-02: stories260K 0.009-0.012% of their range, GQA F16
// 0.028-0.031%, GQA Q8_0 0.76-0.89%, Phi-3 F16 0.004-0.006%, qwen3moe /
// Mixtral F16 0.007-0.010% (2026-12-06; routing near ties not excluded);
// asserted < 0.2% (F32/F16 files) and < 2% (Q8_0), with the same argmax
// and the same 32 greedy tokens.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "blend/xchunk_task.h"
#include "engine/llamacpp/llama_engine.h"
#include "gtest/gtest.h"
#include "llama.h"
#include "model/loader.h"
#include "tests/integration/serve_process.h"
#include "tests/integration/client_util.h"
#include "tests/llamacpp/compare_util.h"
#include "tests/support/random_model.h"
#include "tests/model/test_util.h"
#include "tests/support/llamacpp_oracle.h"
#include "tests/support/require.h"
#include "tests/support/run_command.h"

namespace ragkv::model::testing {
namespace {

namespace lc = ragkv::engine::llamacpp;
using ragkv::testing::LlamaCppModel;
using ragkv::testing::ServeProcess;
using ragkv::testing::TempDir;

// Files: the random files, written once per process.
const TempDir& Files() {
  static const TempDir dir;
  static const bool written = [] {
    ragkv::testing::WriteRandomModel({"gqa", "llama"}, /*f16=*/true, dir.path() + "/gqa_f16.gguf");
    ragkv::testing::WriteRandomModel({.name = "phi3", .arch = "phi3"}, /*f16=*/true,
                                     dir.path() + "/phi3_f16.gguf");
    ragkv::testing::WriteRandomModel({.name = "qwen3moe", .arch = "qwen3moe", .experts = 8,
                                      .experts_used = 2, .expert_ffn = 256},
                                     /*f16=*/true, dir.path() + "/qwen3moe_f16.gguf");
    ragkv::testing::WriteRandomModel({.name = "mixtral", .arch = "llama", .experts = 4, .experts_used = 2},
                                     /*f16=*/true, dir.path() + "/mixtral_f16.gguf");
    // Pattern 6 over 7 layers, window 16: prompts cross the window.
    ragkv::testing::WriteRandomModel(
        {.name = "gemma3", .arch = "gemma3", .sliding_window = 16, .layers = 7, .tied = true},
        /*f16=*/true, dir.path() + "/gemma3_f16.gguf");
    return ragkv::testing::LlamaCppQuantize(dir.path() + "/gqa_f16.gguf",
                                            dir.path() + "/gqa_q8_0.gguf", 7).ok();
  }();
  EXPECT_TRUE(written);
  return dir;
}

std::string FilePath(const std::string& name) {
  if (name == "stories260K") return ModelFile("stories260K.gguf");
  return Files().path() + "/" + name + ".gguf";
}

const char* kDocs[] = {
    "Once upon a time there was a little girl named Lily. She loved to play.",
    "One day a big dog came to the park and wanted to play with the ball.",
};

class LlamaCppEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(GetParam() != "stories260K" || HaveModelFile("stories260K.gguf"))
        << "no stories260K.gguf";
    path_ = FilePath(GetParam());
    auto m = LoadModel(path_);
    ASSERT_TRUE(m.ok()) << m.status();
    fp_.assign((*m)->fingerprint().begin(), (*m)->fingerprint().end());
    vocab_ = (*m)->config().vocab_size;
    config_ = (*m)->config();
    auto ref = LlamaCppModel::Load(path_, {});
    ASSERT_TRUE(ref.ok()) << ref.status();
    ref_ = std::move(*ref);
  }
  // Serve: a real `ragkv serve` of this file; the two documents ingested
  // and precomputed (their KV in the store).
  void Serve() {
    std::filesystem::create_directories(dir_.path() + "/corpus");
    for (int i = 0; i < 2; ++i) std::ofstream(dir_.path() + "/corpus/doc" + std::to_string(i) + ".txt") << kDocs[i];
    auto s = ServeProcess::Start({"--data-dir", dir_.path() + "/d", "--model", path_,
                                  "--corpus-root", dir_.path()},
                                 dir_.path() + "/serve.log");
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    client_ = server_->NewClient();
    auto job = ragkv::testing::RunPrecomputeJob(client_.get(), dir_.path() + "/corpus");
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << job->DebugString();
  }
  // FromChunks: the request blends both documents' first chunks and an
  // 8-token query; prompt_ and the references become that prompt's.
  v1::BlendRequest FromChunks() {
    v1::SearchRequest sr;
    sr.set_text("Lily dog park");
    sr.set_k(2);
    sr.set_include_content(true);
    auto hits = client_->Search(sr);
    EXPECT_TRUE(hits.ok()) << hits.status();
    v1::BlendRequest br;
    prompt_.clear();
    chunk_tokens_ = 0;
    for (const auto& h : hits->hits()) {
      br.add_segments()->set_chunk_id(h.chunk().chunk_id());
      prompt_.insert(prompt_.end(), h.chunk().token_ids().begin(), h.chunk().token_ids().end());
    }
    chunk_tokens_ = static_cast<int>(prompt_.size());
    const std::vector<int32_t> query = {30, 31, 32, 33, 34, 35, 36, 37};
    br.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
    prompt_.insert(prompt_.end(), query.begin(), query.end());
    br.mutable_options()->set_mode(v1::BLEND_MODE_FULL_PREFILL);
    br.mutable_options()->set_output_dtype(v1::DTYPE_F16);
    own_ = *ref_->Logits(prompt_, /*all=*/false);
    own_greedy_ = *ref_->Greedy(prompt_, 32);
    return br;
  }
  std::vector<int32_t> GreedyOn(std::vector<float> l) {
    std::vector<int32_t> out;
    for (int i = 0; i < 32; ++i) {
      llama_token best = model::Argmax(l.data(), static_cast<int32_t>(l.size()));
      out.push_back(best);
      EXPECT_EQ(llama_decode(ref_->context(), llama_batch_get_one(&best, 1)), 0);
      const float* p = llama_get_logits_ith(ref_->context(), -1);
      l.assign(p, p + vocab_);
    }
    return out;
  }
  // ExpectOwnAnswer: r's logits are llama.cpp's own prefill's (within the
  // file's tolerance above; `local`: r is that prefill, within 1e-4 of the
  // range), same argmax, same 32 greedy tokens.
  void ExpectOwnAnswer(const lc::LlamaCppEngine::Result& r, bool local = false) {
    const double frac = local ? 1e-4 : (GetParam().ends_with("_q8_0") ? 0.02 : 0.002);
    const Agreement g = CompareLogits(r.logits, own_, vocab_);
    std::printf("%s: max |diff| %.5f of range %.2f (%.4f%%)\n", GetParam().c_str(), g.max_abs,
                g.range, 100 * g.max_abs / g.range);
    EXPECT_LE(g.max_abs, frac * g.range) << "max |diff| " << g.max_abs << " of " << g.range;
    EXPECT_EQ(g.top1, 1.0);
    const std::vector<int32_t> ours = GreedyOn(r.logits);
    if (!GetParam().ends_with("_q8_0") || local) {
      EXPECT_EQ(ours, own_greedy_);
      return;
    }
    ExpectEqualUpToANearTie(ours, 2 * g.max_abs);
  }
  // ExpectEqualUpToANearTie: a quantized file's 32 greedy tokens equal
  // llama.cpp's own, or part at a step where llama.cpp itself scores the
  // two tokens within `tie` logits of each other (the engines' K/V differ
  // by the file's tolerance: random weights make near-ties common).
  void ExpectEqualUpToANearTie(const std::vector<int32_t>& ours, double tie) {
    ASSERT_EQ(ours.size(), own_greedy_.size());
    size_t i = 0;
    while (i < ours.size() && ours[i] == own_greedy_[i]) ++i;
    if (i == ours.size()) return;
    std::vector<int32_t> p = prompt_;
    p.insert(p.end(), own_greedy_.begin(), own_greedy_.begin() + static_cast<long>(i));
    const std::vector<float> l = *ref_->Logits(p, /*all=*/false);
    const double gap = l[own_greedy_[i]] - l[ours[i]];
    std::printf("greedy parts at step %zu: llama.cpp's own gap %.5f (tie bound %.5f)\n", i, gap, tie);
    EXPECT_LE(gap, tie) << "greedy parted at step " << i << " where llama.cpp is not near a tie";
  }
  std::unique_ptr<lc::LlamaCppEngine> Engine(Client* c, std::string fp = "") {
    lc::LlamaCppEngine::Options o;
    o.ctx = ref_->context();
    o.sidecar = c;
    o.model_fingerprint = fp.empty() ? fp_ : fp;
    o.config = &config_;  // as `ragkv serve` passes it (gemma3's SWA split comes from it)
    auto e = lc::LlamaCppEngine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  TempDir dir_;
  std::unique_ptr<ServeProcess> server_;
  std::unique_ptr<Client> client_;
  std::string path_, fp_;
  ModelConfig config_;
  int vocab_ = 0, chunk_tokens_ = 0;
  std::unique_ptr<LlamaCppModel> ref_;
  std::vector<int32_t> prompt_, own_greedy_;
  std::vector<float> own_;
};

// Prefill in two halves: the Blend stream fetched on another thread, the
// rows applied on the context's: the same answer as Prefill; a fetch that
// failed falls back in Apply.
TEST_P(LlamaCppEngineTest, FetchOnAnotherThreadThenApplyIsPrefill) {
  ASSERT_NO_FATAL_FAILURE(Serve());
  const v1::BlendRequest request = FromChunks();
  auto engine = Engine(client_.get());
  ASSERT_NE(engine, nullptr);
  std::unique_ptr<lc::LlamaCppEngine::Fetched> f;
  std::thread t([&] { f = engine->Fetch(request); });
  t.join();
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->status.ok()) << f->status;
  auto r = engine->Apply(std::move(f), prompt_, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->fallback.empty()) << r->fallback;
  EXPECT_EQ(r->handed_over_tokens, static_cast<int>(prompt_.size()) - 1);
  EXPECT_EQ(r->reused_tokens, chunk_tokens_);
  ExpectOwnAnswer(*r);
  auto failed = std::make_unique<lc::LlamaCppEngine::Fetched>();
  failed->status = absl::UnavailableError("cut");
  auto fb = engine->Apply(std::move(failed), prompt_, 0);
  ASSERT_TRUE(fb.ok()) << fb.status();
  EXPECT_FALSE(fb->fallback.empty());
  EXPECT_EQ(fb->prefilled_tokens, static_cast<int>(prompt_.size()));
  ExpectOwnAnswer(*fb, /*local=*/true);
  EXPECT_EQ(engine->fallbacks(), 1);
}

TEST_P(LlamaCppEngineTest, FusedKvFromTheSidecarGivesLlamaCppsOwnAnswer) {
  ASSERT_NO_FATAL_FAILURE(Serve());
  const v1::BlendRequest request = FromChunks();
  auto engine = Engine(client_.get());
  ASSERT_NE(engine, nullptr);
  auto r = engine->Prefill(request, prompt_, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->fallback.empty()) << r->fallback;
  EXPECT_EQ(r->handed_over_tokens, static_cast<int>(prompt_.size()) - 1);
  EXPECT_EQ(r->reused_tokens, chunk_tokens_);  // both chunks came from the store
  EXPECT_EQ(r->prefilled_tokens, 1);
  ExpectOwnAnswer(*r);
  EXPECT_EQ(engine->fallbacks(), 0);
}

// The same prompt as raw tokens: the sidecar finds both chunks in it, and
// llama.cpp's answer is the same.
TEST_P(LlamaCppEngineTest, RawPromptTokensGiveTheSameAnswer) {
  ASSERT_NO_FATAL_FAILURE(Serve());
  const v1::BlendRequest request = FromChunks();
  auto engine = Engine(client_.get());
  ASSERT_NE(engine, nullptr);
  auto r = engine->PrefillRaw(prompt_, 8, request.options(), 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->fallback.empty()) << r->fallback;
  EXPECT_EQ(r->reused_tokens, chunk_tokens_);
  EXPECT_EQ(r->handed_over_tokens, static_cast<int>(prompt_.size()) - 1);
  ExpectOwnAnswer(*r);
  // CacheBlend at r = 0.15 from the same raw prompt: rows from the store,
  // some recomputed, the rest reused.
  v1::BlendOptions cb;
  cb.set_mode(v1::BLEND_MODE_CACHEBLEND);
  cb.set_recompute_ratio(0.15f);
  auto b = engine->PrefillRaw(prompt_, 8, cb, 0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->fallback.empty()) << b->fallback;
  EXPECT_EQ(b->reused_tokens, chunk_tokens_);
  EXPECT_GT(b->recomputed_tokens, 0);
  EXPECT_LT(b->recomputed_tokens, static_cast<int>(prompt_.size()));
}

// A fused prompt that agrees with the engine's only up to the query: the
// agreeing rows are used, llama.cpp prefills the rest itself.
TEST_P(LlamaCppEngineTest, AFusedPromptThatAgreesOnlyUpToATokenIsUsedUpToIt) {
  ASSERT_NO_FATAL_FAILURE(Serve());
  const v1::BlendRequest request = FromChunks();
  for (int i = chunk_tokens_; i < static_cast<int>(prompt_.size()); ++i) prompt_[i] += 10;
  own_ = *ref_->Logits(prompt_, false);
  own_greedy_ = *ref_->Greedy(prompt_, 32);
  auto engine = Engine(client_.get());
  ASSERT_NE(engine, nullptr);
  auto r = engine->Prefill(request, prompt_, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->fallback.find("agrees"), std::string::npos) << r->fallback;
  EXPECT_EQ(r->handed_over_tokens, chunk_tokens_);
  EXPECT_EQ(r->prefilled_tokens, static_cast<int>(prompt_.size()) - chunk_tokens_);
  ExpectOwnAnswer(*r);
  EXPECT_EQ(engine->fallbacks(), 1);
}

TEST_P(LlamaCppEngineTest, ASidecarThatIsDownOrServesAnotherModelFallsBack) {
  ClientOptions co;
  co.target = absl::StrCat("127.0.0.1:", ragkv::testing::FreeLoopbackPort());  // nobody listens
  co.max_attempts = 1;
  auto down = Client::Create(co);
  ASSERT_TRUE(down.ok());
  ASSERT_NO_FATAL_FAILURE(Serve());
  const v1::BlendRequest request = FromChunks();
  lc::LlamaCppEngine::Options o;
  o.ctx = ref_->context();
  o.sidecar = down->get();
  o.model_fingerprint = fp_;
  o.deadline = absl::Seconds(2);
  auto engine = lc::LlamaCppEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto r = (*engine)->Prefill(request, prompt_, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->fallback.empty());
  EXPECT_EQ(r->handed_over_tokens, 0);
  EXPECT_EQ(r->prefilled_tokens, static_cast<int>(prompt_.size()));
  ExpectOwnAnswer(*r, /*local=*/true);
  EXPECT_EQ((*engine)->fallbacks(), 1);

  // A live sidecar whose model is not this file's: refused, prefilled here.
  std::string other = fp_;
  other[0] ^= 1;
  auto wrong = Engine(client_.get(), other);
  ASSERT_NE(wrong, nullptr);
  auto w = wrong->Prefill(request, prompt_, 0);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_NE(w->fallback.find("fingerprint"), std::string::npos) << w->fallback;
  ExpectOwnAnswer(*w, /*local=*/true);
}

// The layout is checked once at start against ragkv's config of the file:
// the RoPE pairing, the layers and the KV width; a mismatch is refused.
TEST_P(LlamaCppEngineTest, ALayoutThatIsNotTheFilesIsRefusedAtStart) {
  auto m = LoadModel(path_);
  ASSERT_TRUE(m.ok()) << m.status();
  lc::LlamaCppEngine::Options o;
  o.ctx = ref_->context();
  o.model_fingerprint = fp_;
  model::ModelConfig c = (*m)->config();
  o.config = &c;
  EXPECT_TRUE(lc::LlamaCppEngine::Create(o).ok());
  c.rope_layout = c.rope_layout == kernels::RopeLayout::kInterleaved ? kernels::RopeLayout::kHalfSplit
                                                                      : kernels::RopeLayout::kInterleaved;
  auto rope = lc::LlamaCppEngine::Create(o);
  EXPECT_EQ(rope.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(rope.status().message().find("RoPE"), std::string::npos) << rope.status();
  c = (*m)->config();
  c.n_layers += 1;
  EXPECT_EQ(lc::LlamaCppEngine::Create(o).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A deadline the sidecar cannot meet: llama.cpp prefills by itself.
TEST_P(LlamaCppEngineTest, ADeadlineExceededFallsBack) {
  ASSERT_NO_FATAL_FAILURE(Serve());
  const v1::BlendRequest request = FromChunks();
  lc::LlamaCppEngine::Options o;
  o.ctx = ref_->context();
  o.sidecar = client_.get();
  o.model_fingerprint = fp_;
  o.deadline = absl::Microseconds(1);
  auto engine = lc::LlamaCppEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto r = (*engine)->Prefill(request, prompt_, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->fallback.find("DEADLINE_EXCEEDED"), std::string::npos) << r->fallback;
  EXPECT_EQ(r->prefilled_tokens, static_cast<int>(prompt_.size()));
  ExpectOwnAnswer(*r, /*local=*/true);
}

// Chunks in the catalogue whose KV the store does not hold (ingested, never
// precomputed): the sidecar computes their rows fresh, nothing counts as
// reused, and the answer is still llama.cpp's own (full reuse of nothing =
// a full computation).
TEST_P(LlamaCppEngineTest, ChunksMissingFromTheStoreAreComputedNotReused) {
  auto s = ServeProcess::Start({"--data-dir", dir_.path() + "/d", "--model", path_},
                               dir_.path() + "/serve.log");
  ASSERT_TRUE(s.ok()) << s.status();
  server_ = std::move(*s);
  client_ = server_->NewClient();
  std::vector<v1::Document> docs(2);
  for (int i = 0; i < 2; ++i) {
    docs[i].set_doc_id(absl::StrCat("doc", i));
    docs[i].set_text(kDocs[i]);
  }
  ASSERT_TRUE(client_->IngestDocuments(docs).ok());
  v1::BlendRequest request = FromChunks();
  request.mutable_options()->set_mode(v1::BLEND_MODE_FULL_REUSE);
  auto engine = Engine(client_.get());
  ASSERT_NE(engine, nullptr);
  auto r = engine->Prefill(request, prompt_, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->fallback.empty()) << r->fallback;
  EXPECT_EQ(r->reused_tokens, 0);
  EXPECT_EQ(r->handed_over_tokens, static_cast<int>(prompt_.size()) - 1);
  ExpectOwnAnswer(*r);
}

#ifdef RAGKV_BINARY
// `ragkv llama`: retrieval, blend and generation end to end; its answer in
// cacheblend mode at r = 1 (full) is llama.cpp's own (mode local).
TEST_P(LlamaCppEngineTest, RagkvLlamaCommandAnswersLikeLlamaCppAlone) {
  ASSERT_NO_FATAL_FAILURE(Serve());
  auto run = [&](const std::string& mode, int* rc) {
    const std::string cmd = absl::StrCat(RAGKV_BINARY, " llama --model ", path_, " --server ",
                                         server_->address(), " --question 'Lily and the dog' ",
                                         "--k 2 --max-new-tokens 8 --mode ", mode, " 2>&1");
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    *rc = p == nullptr ? -1 : WEXITSTATUS(::pclose(p));
    return out;
  };
  int rc = 0;
  const std::string full = run("full", &rc);
  ASSERT_EQ(rc, 0) << full;
  EXPECT_NE(full.find("handed over"), std::string::npos) << full;
  EXPECT_EQ(full.find("fallback"), std::string::npos) << full;
  const std::string local = run("local", &rc);
  ASSERT_EQ(rc, 0) << local;
  auto answer = [](const std::string& s) { return s.substr(s.find("answer:"), s.find("context:") - s.find("answer:")); };
  EXPECT_EQ(answer(full), answer(local));
  EXPECT_EQ((run("sideways", &rc), rc), 2);
}

// `ragkv bench engine` end to end on a tiny workload: one line per strategy
// in the documented format, llama.cpp's full prefill as its own reference
// (kl 0, top-1 1), the CSV / JSON / PNG written. No timing is asserted.
TEST(LlamaCppBenchEngineTest, PrintsEveryStrategyAndWritesItsFiles) {
  RAGKV_REQUIRE_OR_SKIP(HaveModelFile("stories260K.gguf")) << "no stories260K.gguf";
  TempDir dir;
  const std::string cmd = absl::StrCat(
      RAGKV_BINARY, " bench engine --model ", ModelFile("stories260K.gguf"),
      " --prompts 2 --chunks 2 --chunk-tokens 32 --query-tokens 8 --ratios 0.5 --out-dir ",
      dir.path(), "/out 2>/dev/null");  // a folder it has to create
  std::string out;
  ASSERT_EQ(ragkv::testing::RunCommand(cmd, &out), 0) << out;
  for (const char* s : {"strategy=full-prefill r=0.00", "strategy=prefix-cache", "strategy=full-reuse",
                        "strategy=cacheblend r=0.50"}) {
    EXPECT_NE(out.find(absl::StrCat("engine=llama.cpp ", s)), std::string::npos) << s << "\n" << out;
  }
  EXPECT_NE(out.find("vs_full=1.000 kl=0.00000 top1=1.000"), std::string::npos) << out;
  for (const char* f : {"/out/samples.csv", "/out/summary.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() + f)) << f;
  }
}

// `ragkv bench engine --task xchunk`, on the instrument trained in each
// architecture (models/xchunk*.gguf, tools/xchunk/archs.py): the passages
// go as documents whose KV was stored beforehand. Full reuse must then lose
// the cross-passage binding (KL > 0.1: the stored, isolated KV was used,
// not a fresh prefill of the document in context, nor a fallback), r = 1.0
// must be llama.cpp's own prefill (KL ~ 0, the same answers).
class LlamaCppBenchXchunkTest : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaCppBenchXchunkTest, PassagesAreServedAsStoredDocuments) {
  const std::string model =
      std::filesystem::path(blend::XchunkModelPath()).replace_filename(GetParam()).string();
  RAGKV_REQUIRE_OR_SKIP(std::filesystem::exists(model)) << "no " << model;
  const std::string cmd = absl::StrCat(RAGKV_BINARY, " bench engine --task xchunk --model ", model,
                                       " --prompts 8 --chunks 4 --seed 7 --ratios 1.0 2>/dev/null");
  std::string out;
  ASSERT_EQ(ragkv::testing::RunCommand(cmd, &out), 0) << out;
  auto field = [&](const std::string& strategy, const std::string& key) {
    const size_t line = out.find("strategy=" + strategy + " ");
    if (line == std::string::npos) return -1.0;
    const size_t at = out.find(" " + key + "=", line);
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + key.size() + 2));
  };
  EXPECT_NE(out.find("# split=dev prompts=8"), std::string::npos) << out;
  EXPECT_EQ(field("full-prefill", "acc"), 1.0) << out;
  EXPECT_GT(field("full-reuse", "kl"), 0.1) << out;
  EXPECT_LT(field("cacheblend", "kl"), 1e-3) << out;
  EXPECT_EQ(field("cacheblend", "acc"), 1.0) << out;
  for (const char* row : {"| full-reuse | 8 |", "| cacheblend r=1.00 | 8 |"}) {  // no fallbacks
    const size_t at = out.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << out;
    const std::string line = out.substr(at, out.find('\n', at) - at);
    EXPECT_TRUE(absl::EndsWith(line, "| 0 |")) << line;
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, LlamaCppBenchXchunkTest,
                         ::testing::Values("xchunk.gguf", "xchunk_phi3.gguf",
                                           "xchunk_qwen3moe.gguf", "xchunk_gemma3.gguf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           return n.substr(0, n.find('.'));
                         });
#endif

INSTANTIATE_TEST_SUITE_P(Files, LlamaCppEngineTest,
                         ::testing::Values("stories260K", "gqa_f16", "gqa_q8_0", "phi3_f16",
                                           "qwen3moe_f16", "mixtral_f16", "gemma3_f16"));
// (A phi3 Q8_0 file passes every test above except the `ragkv llama` text
// comparison, whose 8 greedy tokens parted from llama.cpp alone's at the
// 7th (measured 2026-12-06; its handed-over logits were 0.46-0.55% of the
// range from llama.cpp's own, as gqa_q8_0's are): that test has no
// near-tie allowance, so it is not instantiated; quantized phi3 is checked
// in arch_oracle_test. docs/model.md, Phi-3.)

// The sidecar killed (SIGKILL) while it streams: layer 0 has arrived, the
// rest never does; llama.cpp prefills the whole prompt itself. A model big
// enough that a layer of a 1,000-token full prefill takes the sidecar tens
// of milliseconds, so the kill lands mid-stream.
TEST(LlamaCppEngineKillTest, SidecarKilledMidStreamGivesPlainLlamaCppsAnswer) {
  TempDir dir;
  const std::string path = dir.path() + "/slow.gguf";
  ragkv::testing::RandomShape shape;
  shape.dim = 512, shape.layers = 8, shape.heads = 8, shape.kv_heads = 4, shape.ffn = 1536;
  shape.context = 2048;
  ragkv::testing::WriteRandomModel({"slow", "llama"}, true, path, shape);
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string fp((*m)->fingerprint().begin(), (*m)->fingerprint().end());
  const int vocab = (*m)->config().vocab_size;
  std::string text;
  for (int i = 0; i < 40; ++i) text += kDocs[i % 2], text += " ";
  std::filesystem::create_directories(dir.path() + "/corpus");
  std::ofstream(dir.path() + "/corpus/long.txt") << text;
  auto server = ServeProcess::Start({"--data-dir", dir.path() + "/d", "--model", path,
                                     "--corpus-root", dir.path(), "--max-seq-len", "2048"},
                                    dir.path() + "/serve.log");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = (*server)->NewClient();
  std::vector<v1::Document> docs(1);
  docs[0].set_doc_id("long");
  docs[0].set_text(text);
  auto ing = client->IngestDocuments(docs);
  ASSERT_TRUE(ing.ok()) << ing.status();
  v1::BlendRequest br;
  std::vector<int32_t> prompt;
  auto chunks = client->GetChunks({ing->ingested(0).chunk_ids().begin(),
                                   ing->ingested(0).chunk_ids().end()});
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  for (const auto& c : chunks->chunks()) {
    if (prompt.size() + c.token_ids().size() > 1200) break;
    br.add_segments()->set_chunk_id(c.chunk_id());
    prompt.insert(prompt.end(), c.token_ids().begin(), c.token_ids().end());
  }
  ASSERT_GE(prompt.size(), 500u);
  const std::vector<int32_t> query = {30, 31, 32, 33};
  br.add_segments()->mutable_tokens()->mutable_ids()->Assign(query.begin(), query.end());
  prompt.insert(prompt.end(), query.begin(), query.end());
  br.mutable_options()->set_mode(v1::BLEND_MODE_FULL_PREFILL);

  auto ref = LlamaCppModel::Load(path, {.n_ctx = 2048});
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<float> own = *(*ref)->Logits(prompt, false);
  ServeProcess* sp = server->get();
  lc::LlamaCppEngine::Options o;
  o.ctx = (*ref)->context();
  o.sidecar = client.get();
  o.model_fingerprint = fp;
  int layers_seen = 0;
  o.on_layer = [&](int layer) {
    ++layers_seen;
    if (layer == 0) sp->Kill9();
  };
  auto engine = lc::LlamaCppEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto r = (*engine)->Prefill(br, prompt, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(layers_seen, 8) << "the stream was not cut";
  EXPECT_FALSE(r->fallback.empty());
  EXPECT_EQ(r->handed_over_tokens, 0);
  EXPECT_EQ(r->prefilled_tokens, static_cast<int>(prompt.size()));
  const Agreement g = CompareLogits(r->logits, own, vocab);
  EXPECT_LE(g.max_abs, 1e-4 * g.range) << "the fallback is llama.cpp's own prefill";
  EXPECT_EQ((*engine)->fallbacks(), 1);
}

}  // namespace
}  // namespace ragkv::model::testing
