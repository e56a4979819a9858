// Raw-token blending over real gRPC (issue 18): an engine sends its whole
// prompt as token ids and the sidecar finds the stored chunks inside it.
// Ground truth: the test places the chunks itself (shuffled, shifted by
// random filler, repeated) and knows where each one sits.
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

class RawPromptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveTestModel()) return;
    dir_ = new TempDir();
    WriteCorpus(dir_->path() + "/corpus", 8);
    services::SidecarOptions o = TestSidecarOptions(dir_->path() + "/data");
    o.corpus_roots = {dir_->path()};
    auto s = services::Sidecar::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    sidecar_ = s->release();
    client_ = ClientFor(sidecar_->address()).release();
    auto last = RunPrecomputeJob(client_, dir_->path() + "/corpus", 2);
    ASSERT_TRUE(last.ok()) << last.status();
    ASSERT_EQ(last->state(), v1::JOB_STATE_SUCCEEDED) << last->DebugString();
    v1::SearchRequest sr;
    sr.set_text("Lily loved the ball");
    sr.set_k(16);
    sr.set_include_content(true);
    auto r = client_->Search(sr);
    ASSERT_TRUE(r.ok()) << r.status();
    chunks_ = new std::vector<std::vector<int32_t>>();
    ids_ = new std::vector<uint64_t>();
    for (const auto& h : r->hits()) {
      // A document's short tail (< 24 tokens) is not a chunk raw matching
      // finds whole (chunk_matcher.h: not indexed below 16, no second anchor
      // below 24).
      if (h.chunk().token_ids_size() < 24) continue;
      chunks_->emplace_back(h.chunk().token_ids().begin(), h.chunk().token_ids().end());
      ids_->push_back(h.chunk().chunk_id());
    }
  }
  static void TearDownTestSuite() {
    delete client_;
    delete sidecar_;
    delete chunks_;
    delete ids_;
    delete dir_;
  }
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
    ASSERT_NE(sidecar_, nullptr);
    ASSERT_GE(chunks_->size(), 6u);
  }

  static v1::BlendRequest Raw(const std::vector<int32_t>& ids, uint32_t query, v1::BlendMode mode,
                              float ratio = 0) {
    v1::BlendRequest req;
    req.mutable_raw()->mutable_ids()->Assign(ids.begin(), ids.end());
    req.mutable_raw()->set_query_tokens(query);
    req.mutable_options()->set_mode(mode);
    req.mutable_options()->set_recompute_ratio(ratio);
    return req;
  }

  static TempDir* dir_;
  static services::Sidecar* sidecar_;
  static Client* client_;
  static std::vector<std::vector<int32_t>>* chunks_;
  static std::vector<uint64_t>* ids_;
};
TempDir* RawPromptTest::dir_ = nullptr;
services::Sidecar* RawPromptTest::sidecar_ = nullptr;
Client* RawPromptTest::client_ = nullptr;
std::vector<std::vector<int32_t>>* RawPromptTest::chunks_ = nullptr;
std::vector<uint64_t>* RawPromptTest::ids_ = nullptr;

const std::vector<int32_t> kQuery = {365, 301, 285, 311, 261, 400};

// The same chunks as explicit segments and as one raw prompt: the same
// fused prompt, spans and KV (the same computation, bit for bit).
TEST_F(RawPromptTest, RawPromptGivesTheFusedKvOfExplicitSegments) {
  for (auto [mode, ratio] : {std::pair{v1::BLEND_MODE_FULL_REUSE, 0.f},
                             std::pair{v1::BLEND_MODE_CACHEBLEND, 0.3f},
                             std::pair{v1::BLEND_MODE_FULL_PREFILL, 0.f}}) {
    v1::BlendRequest seg;
    std::vector<int32_t> prompt;
    for (int i : {2, 0, 1}) {
      seg.add_segments()->set_chunk_id((*ids_)[i]);
      prompt.insert(prompt.end(), (*chunks_)[i].begin(), (*chunks_)[i].end());
    }
    seg.add_segments()->mutable_tokens()->mutable_ids()->Assign(kQuery.begin(), kQuery.end());
    seg.mutable_options()->set_mode(mode);
    seg.mutable_options()->set_recompute_ratio(ratio);
    prompt.insert(prompt.end(), kQuery.begin(), kQuery.end());
    CollectingKVSink a, b;
    ASSERT_TRUE(client_->Blend(seg, &a).ok());
    absl::Status s = client_->Blend(Raw(prompt, kQuery.size(), mode, ratio), &b);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(b.info.token_ids, prompt);
    EXPECT_EQ(a.info.token_ids, b.info.token_ids);
    ASSERT_EQ(a.info.spans.size(), b.info.spans.size());
    for (size_t i = 0; i < a.info.spans.size(); ++i) {
      EXPECT_EQ(a.info.spans[i].begin, b.info.spans[i].begin) << i;
      EXPECT_EQ(a.info.spans[i].end, b.info.spans[i].end) << i;
      EXPECT_EQ(a.info.spans[i].is_chunk, b.info.spans[i].is_chunk) << i;
      EXPECT_EQ(a.info.spans[i].cache_hit, b.info.spans[i].cache_hit) << i;
    }
    ASSERT_EQ(a.k.size(), b.k.size());
    for (size_t l = 0; l < a.k.size(); ++l) {
      EXPECT_EQ(a.k[l], b.k[l]) << "K layer " << l << " mode " << mode;
      EXPECT_EQ(a.v[l], b.v[l]) << "V layer " << l << " mode " << mode;
    }
    EXPECT_EQ(a.stats.recomputed_tokens, b.stats.recomputed_tokens);
  }
}

// Shuffled, shifted, partially repeated: every placed chunk is found at its
// place (recall 100%), nothing else is a chunk (no false hit), all from the
// store.
TEST_F(RawPromptTest, FindsEveryStoredChunkShuffledShiftedAndRepeated) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    std::mt19937 rng(seed);
    std::vector<int> order(chunks_->size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(4);
    order.push_back(order[0]);  // a repeat
    std::uniform_int_distribution<int> gap(0, 12);
    std::uniform_int_distribution<int32_t> filler(3, 511);
    std::vector<int32_t> prompt = {1};  // a BOS
    struct Placed { uint32_t begin; int chunk; };
    std::vector<Placed> truth;
    for (int c : order) {
      for (int g = gap(rng); g > 0; --g) prompt.push_back(filler(rng));
      truth.push_back({static_cast<uint32_t>(prompt.size()), c});
      prompt.insert(prompt.end(), (*chunks_)[c].begin(), (*chunks_)[c].end());
    }
    prompt.insert(prompt.end(), kQuery.begin(), kQuery.end());
    CollectingKVSink sink;
    absl::Status s = client_->Blend(Raw(prompt, kQuery.size(), v1::BLEND_MODE_FULL_REUSE), &sink);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(sink.info.token_ids, prompt);
    std::vector<FusedSpan> found;
    for (const FusedSpan& sp : sink.info.spans) {
      if (sp.is_chunk) found.push_back(sp);
    }
    ASSERT_EQ(found.size(), truth.size()) << "seed " << seed;
    for (size_t i = 0; i < truth.size(); ++i) {
      const std::vector<int32_t>& want = (*chunks_)[truth[i].chunk];
      EXPECT_EQ(found[i].begin, truth[i].begin) << "seed " << seed << " chunk " << i;
      EXPECT_EQ(found[i].end - found[i].begin, want.size()) << "seed " << seed;
      EXPECT_EQ(found[i].chunk_begin, 0u);
      EXPECT_TRUE(found[i].cache_hit);
      // Chunks with equal tokens (the corpus repeats sentences) may be
      // reported under either id: the tokens are what must agree.
      EXPECT_TRUE(std::equal(want.begin(), want.end(), prompt.begin() + found[i].begin));
    }
    EXPECT_EQ(sink.k.size(), static_cast<size_t>(sink.info.num_layers));
  }
}

// A chunk whose first token came out differently in context: the rest of
// it is still reused from the store, the changed token is a fresh row.
TEST_F(RawPromptTest, ABoundaryTokenThatDiffersIsAFreshRowNotAMiss) {
  const std::vector<int32_t>& c = (*chunks_)[3];
  std::vector<int32_t> prompt = {1, 60, 61, 62, 63, 64, 65, 66, 67, 77, 78};
  const uint32_t at = prompt.size();
  prompt.insert(prompt.end(), c.begin() + 1, c.end());
  prompt.insert(prompt.end(), kQuery.begin(), kQuery.end());
  CollectingKVSink sink;
  absl::Status s = client_->Blend(Raw(prompt, kQuery.size(), v1::BLEND_MODE_CACHEBLEND, 0.2f), &sink);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(sink.info.spans.size(), 3u);  // prefix, the chunk, the query
  const FusedSpan& sp = sink.info.spans[1];
  EXPECT_TRUE(sp.is_chunk);
  EXPECT_TRUE(sp.cache_hit);
  EXPECT_EQ(sp.begin, at);
  EXPECT_EQ(sp.end, at + c.size() - 1);
  // Row 1 of this chunk, or of one with the same text (the corpus repeats
  // sentences) at its row chunk_begin: the span's rows are that chunk's.
  auto got = client_->GetChunks({sp.chunk_id});
  ASSERT_TRUE(got.ok()) << got.status();
  const auto& ids = got->chunks(0).token_ids();
  ASSERT_GE(sp.chunk_begin, 1u);
  ASSERT_LE(sp.chunk_begin + (sp.end - sp.begin), static_cast<uint32_t>(ids.size()));
  EXPECT_TRUE(std::equal(prompt.begin() + sp.begin, prompt.begin() + sp.end,
                         ids.begin() + sp.chunk_begin));
  // Under full reuse those rows are the stored chunk's, re-rotated to the
  // same positions as when the whole chunk is blended explicitly there.
  ASSERT_LE(sp.chunk_begin, 8u);  // the boundary slack
  v1::BlendRequest whole;
  const std::vector<int32_t> lead(prompt.begin(), prompt.begin() + at - sp.chunk_begin);
  whole.add_segments()->mutable_tokens()->mutable_ids()->Assign(lead.begin(), lead.end());
  whole.add_segments()->set_chunk_id(sp.chunk_id);
  whole.add_segments()->mutable_tokens()->mutable_ids()->Assign(kQuery.begin(), kQuery.end());
  whole.mutable_options()->set_mode(v1::BLEND_MODE_FULL_REUSE);
  CollectingKVSink a, b;
  ASSERT_TRUE(client_->Blend(whole, &a).ok());
  ASSERT_TRUE(client_->Blend(Raw(prompt, kQuery.size(), v1::BLEND_MODE_FULL_REUSE), &b).ok());
  const int H = a.info.num_kv_heads, D = a.info.head_dim;
  const int64_t Ta = a.info.num_tokens, Tb = b.info.num_tokens, n = sp.end - sp.begin;
  for (int l = 0; l < a.info.num_layers; ++l) {
    for (int h = 0; h < H; ++h) {
      const size_t off_a = (h * Ta + sp.begin) * D * 4, off_b = (h * Tb + sp.begin) * D * 4;
      EXPECT_EQ(0, std::memcmp(a.k[l].data() + off_a, b.k[l].data() + off_b, n * D * 4))
          << "K layer " << l << " head " << h;
      EXPECT_EQ(0, std::memcmp(a.v[l].data() + off_a, b.v[l].data() + off_b, n * D * 4))
          << "V layer " << l << " head " << h;
    }
  }
}

// Prefix caching reuses exact rows only: a whole chunk at offset 0 is
// loaded as is; a slice of one at offset 0 (a prompt that starts inside a
// chunk) attended to rows the prompt lacks, so it is recomputed.
TEST_F(RawPromptTest, ASliceAtOffsetZeroIsNotAnExactPrefix) {
  const std::vector<int32_t>& c = (*chunks_)[1];
  auto recomputed_in_chunk = [&](const std::vector<int32_t>& prompt) {
    CollectingKVSink sink;
    absl::Status s = client_->Blend(Raw(prompt, kQuery.size(), v1::BLEND_MODE_PREFIX_CACHING), &sink);
    EXPECT_TRUE(s.ok()) << s;
    int n = 0;
    for (const FusedSpan& sp : sink.info.spans) {
      if (!sp.is_chunk || sink.mask.size() < 2) continue;
      EXPECT_TRUE(sp.cache_hit);
      FusedLayerView view{1, {}, {}, sink.mask[1]};
      for (uint32_t t = sp.begin; t < sp.end; ++t) n += view.Recomputed(t);
    }
    return n;
  };
  std::vector<int32_t> whole = c;
  whole.insert(whole.end(), kQuery.begin(), kQuery.end());
  EXPECT_EQ(recomputed_in_chunk(whole), 0);
  std::vector<int32_t> slice(c.begin() + 1, c.end());
  slice.insert(slice.end(), kQuery.begin(), kQuery.end());
  EXPECT_EQ(recomputed_in_chunk(slice), static_cast<int>(c.size()) - 1);
}

TEST_F(RawPromptTest, BadRawPromptsAreRefusedByName) {
  CollectingKVSink sink;
  std::vector<int32_t> prompt = (*chunks_)[0];
  prompt.insert(prompt.end(), kQuery.begin(), kQuery.end());
  v1::BlendRequest both = Raw(prompt, 6, v1::BLEND_MODE_FULL_REUSE);
  both.add_segments()->set_text("q");
  EXPECT_EQ(client_->Blend(both, &sink).code(), absl::StatusCode::kInvalidArgument);
  v1::BlendRequest bos = Raw(prompt, 6, v1::BLEND_MODE_FULL_REUSE);
  bos.mutable_options()->set_add_bos(true);
  absl::Status s = client_->Blend(bos, &sink);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("add_bos"), std::string::npos) << s;
  EXPECT_EQ(client_->Blend(Raw(prompt, prompt.size() + 1, v1::BLEND_MODE_FULL_REUSE), &sink).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Blend(Raw({}, 0, v1::BLEND_MODE_FULL_REUSE), &sink).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Blend(Raw({1, 100000}, 1, v1::BLEND_MODE_FULL_REUSE), &sink).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Blend(Raw(std::vector<int32_t>(600, 5), 1, v1::BLEND_MODE_FULL_REUSE), &sink)
                .code(),
            absl::StatusCode::kOutOfRange);
  // No stored chunk in it: NOT_FOUND (the engine prefills it itself).
  EXPECT_EQ(client_->Blend(Raw(kQuery, 1, v1::BLEND_MODE_FULL_REUSE), &sink).code(),
            absl::StatusCode::kNotFound);
  // The query tail is never matched: a chunk that is all query is no hit.
  EXPECT_EQ(client_->Blend(Raw(prompt, prompt.size(), v1::BLEND_MODE_FULL_REUSE), &sink).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ragkv::testing
