// The request pipeline (pipeline/pipeline.h) on a small synthetic model and
// a real RAM-tier TieredStore: full prefill against the model's own prefill,
// documents served from the store, store-back of misses, the quality gate
// and pinning, bad prompts, a failing sink, and concurrent requests (run
// under TSan by .ci/run) against the same requests run alone.
#include "pipeline/pipeline.h"

#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "blend/blender.h"
#include "blend/kv_source.h"
#include "blend/quality_gate.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "kvstore/ram_tier.h"
#include "kvstore/tiered_store.h"
#include "model/kv_cache_pool.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/pipeline/pipeline_fixture.h"

namespace ragkv::pipeline {
namespace {

// Full prefill through the pipeline is the model's own prefill of the whole
// prompt (f32 KV; tolerance 1e-4 for GEMM shapes that differ).
TEST_F(PipelineTest, FullPrefillMatchesTheModelsPrefill) {
  auto pipe = Make();
  CaptureSink sink;
  RequestOptions ro;
  ro.mode = Mode::kFullPrefill;
  auto r = pipe->Run(DocsPrompt({0, 1, 2}), ro, &sink);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<int32_t> all = AllTokens({0, 1, 2});
  EXPECT_EQ(sink.prompt.tokens, all);
  EXPECT_EQ(r->tokens, static_cast<int64_t>(all.size()));
  EXPECT_EQ(r->strategy, blend::Strategy::kFullPrefill);
  auto ref = blend::PrecomputeChunk(*model_, all, kernels::DType::kF32);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(sink.k.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    const float* rk = reinterpret_cast<const float*>(ref->k[l].data());
    const float* rv = reinterpret_cast<const float*>(ref->v[l].data());
    std::vector<float> k(rk, rk + sink.k[l].size()), v(rv, rv + sink.v[l].size());
    EXPECT_LT(MaxAbsDiff(sink.k[l], k), 1e-4) << "layer " << l;
    EXPECT_LT(MaxAbsDiff(sink.v[l], v), 1e-4) << "layer " << l;
  }
}

// Stored documents are served from the store (cache hits, one tier read
// each); full reuse keeps their rows: a chunk at position 0 is exactly its
// stored KV.
TEST_F(PipelineTest, StoredDocumentsAreServedFromTheStore) {
  StoreDocs(3);
  auto pipe = Make();
  CaptureSink sink;
  RequestOptions ro;
  ro.mode = Mode::kFullReuse;
  ro.pinned = true;
  auto r = pipe->Run(DocsPrompt({0, 1, 2}), ro, &sink);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(sink.prompt.spans.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(sink.prompt.spans[i].cache_hit) << i;
  EXPECT_FALSE(sink.prompt.spans[3].cache_hit);
  EXPECT_EQ(r->tiers.size(), 3u);
  EXPECT_GT(r->kv_bytes_read, 0u);
  auto doc0 = blend::PrecomputeChunk(*model_, docs_[0], kernels::DType::kF32);
  ASSERT_TRUE(doc0.ok());
  const int64_t T = r->tokens, n0 = static_cast<int64_t>(docs_[0].size());
  const int hd = model_->config().head_dim;
  for (int l = 0; l < 4; ++l) {
    const float* ref = reinterpret_cast<const float*>(doc0->k[l].data());
    for (int h = 0; h < model_->config().n_kv_heads; ++h) {
      for (int64_t t = 0; t < n0; ++t) {
        for (int d = 0; d < hd; ++d) {
          ASSERT_NEAR(sink.k[l][(h * T + t) * hd + d], ref[(h * n0 + t) * hd + d], 1e-5);
        }
      }
    }
  }
}

// A document that misses is computed fresh and stored back after the
// request, so the next request hits.
TEST_F(PipelineTest, MissedDocumentsAreStoredBack) {
  auto pipe = Make();
  const kvstore::ChunkKey key = kvstore::ChunkKey::Of(model_->fingerprint(), docs_[4]);
  ASSERT_FALSE(store_->Contains(key));
  CaptureSink sink;
  auto r = pipe->Run(DocsPrompt({4, 5}), RequestOptions{}, &sink);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(sink.prompt.spans[0].cache_hit);
  pipe->DrainStoreBack();
  EXPECT_TRUE(store_->Contains(key));
  CaptureSink again;
  ASSERT_TRUE(pipe->Run(DocsPrompt({4, 5}), RequestOptions{}, &again).ok());
  EXPECT_TRUE(again.prompt.spans[0].cache_hit);
}

// The quality gate turns blending off unless the request is pinned.
TEST_F(PipelineTest, TheGateDecidesUnlessPinned) {
  StoreDocs(3);
  blend::GateDecision off;
  off.blending = false;
  off.reason = "test gate: blending off";
  auto pipe = Make(&off);
  RequestOptions ro;
  ro.ratio = 0.3;
  CaptureSink a;
  auto gated = pipe->Run(DocsPrompt({0, 1, 2}), ro, &a);
  ASSERT_TRUE(gated.ok()) << gated.status();
  EXPECT_EQ(gated->strategy, blend::Strategy::kFullPrefill);
  EXPECT_EQ(gated->gate_reason, "test gate: blending off");
  ro.pinned = true;
  CaptureSink b;
  auto pinned = pipe->Run(DocsPrompt({0, 1, 2}), ro, &b);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(pinned->strategy, blend::Strategy::kCacheBlend);
  EXPECT_DOUBLE_EQ(pinned->ratio, 0.3);
  EXPECT_GT(pinned->mean_recomputed, 0);
}

// A budget request (no ratio) keeps the budget rule's cap, min(1, 3 x
// budget), under a calibrated gate's smaller ratio: the first request of a
// budget gets the budget itself; without the budget the gate's ratio.
TEST_F(PipelineTest, ABudgetRequestSpendsItsBudgetUnderTheGate) {
  StoreDocs(3);
  blend::GateDecision gate;
  gate.ratio = 0.05;
  gate.reason = "test gate: r = 0.05";
  auto pipe = Make(&gate);
  RequestOptions ro;
  ro.adaptive_budget = 0.2;
  CaptureSink a, b;
  auto budget = pipe->Run(DocsPrompt({0, 1, 2}), ro, &a);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->strategy, blend::Strategy::kCacheBlend);
  EXPECT_LE(budget->ratio, 0.2 + 1e-9);
  EXPECT_GE(budget->ratio, 0.18);
  ro.adaptive_budget = 0;
  auto fixed = pipe->Run(DocsPrompt({0, 1, 2}), ro, &b);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_DOUBLE_EQ(fixed->ratio, 0.05);
}

// A repeated prompt whose context is whole blocks (20 + 28 + 32 = 80 rows =
// 5 blocks of 16) is served from the stored exact prefix up to its last
// block, which is computed again (the Blender needs a chunk segment), and
// gives the same KV as the first request (which computed every row).
TEST_F(PipelineTest, ARepeatedPromptIsServedFromTheExactPrefix) {
  auto pipe = Make();
  RequestOptions ro;
  ro.mode = Mode::kPrefixReuse;
  CaptureSink first, second;
  auto a = pipe->Run(DocsPrompt({0, 2, 3}), ro, &first);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->prefix_tokens, 0);
  pipe->DrainStoreBack();
  auto b = pipe->Run(DocsPrompt({0, 2, 3}), ro, &second);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->prefix_tokens, 64);
  ASSERT_EQ(first.k.size(), second.k.size());
  for (size_t l = 0; l < first.k.size(); ++l) {
    EXPECT_LT(MaxAbsDiff(first.k[l], second.k[l]), 1e-4) << l;
    EXPECT_LT(MaxAbsDiff(first.v[l], second.v[l]), 1e-4) << l;
  }
}

TEST_F(PipelineTest, BadPromptsAreRefusedByName) {
  auto pipe = Make();
  CaptureSink sink;
  auto empty = pipe->Run(Prompt{}, RequestOptions{}, &sink);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  Prompt chunk_last = DocsPrompt({0});
  chunk_last.segments.pop_back();
  EXPECT_EQ(pipe->Run(chunk_last, RequestOptions{}, &sink).status().code(),
            absl::StatusCode::kInvalidArgument);
  Prompt by_id;
  by_id.segments.emplace_back();
  by_id.segments.back().source = Segment::Source::kChunkId;
  by_id.segments.back().chunk_id = 42;
  by_id.segments.emplace_back().tokens = query_;
  EXPECT_EQ(pipe->Run(by_id, RequestOptions{}, &sink).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no retriever
  Prompt too_long;
  too_long.segments.emplace_back().tokens.assign(600, 5);
  EXPECT_EQ(pipe->Run(too_long, RequestOptions{}, &sink).status().code(),
            absl::StatusCode::kOutOfRange);
  Prompt bad_empty = DocsPrompt({0});
  bad_empty.segments[0].tokens.clear();
  EXPECT_EQ(pipe->Run(bad_empty, RequestOptions{}, &sink).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A sink error stops the request with that error.
TEST_F(PipelineTest, ASinkErrorStopsTheRequest) {
  class Failing : public CaptureSink {
    absl::Status OnLayer(int l, const model::KVCache& c, absl::Span<const int32_t> r) override {
      if (l == 2) return absl::CancelledError("client went away");
      return CaptureSink::OnLayer(l, c, r);
    }
  } sink;
  auto pipe = Make();
  auto r = pipe->Run(DocsPrompt({0, 1}), RequestOptions{}, &sink);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
}

// Concurrent requests (mixed modes and prompts, store-back on) give what
// each gives alone (tolerance 1e-4: OpenMP may split the work differently).
TEST_F(PipelineTest, ConcurrentRequestsMatchTheSameRequestsAlone) {
  StoreDocs(4);
  auto pipe = Make();
  struct Job {
    std::vector<int> docs;
    Mode mode;
  };
  const std::vector<Job> jobs = {{{0, 1, 2}, Mode::kCacheBlend}, {{2, 3}, Mode::kFullReuse},
                                 {{1, 4}, Mode::kCacheBlend},     {{3, 0, 5}, Mode::kFullPrefill},
                                 {{0, 1, 2}, Mode::kPrefixReuse}, {{5, 2}, Mode::kCacheBlend}};
  auto run = [&](const Job& j, CaptureSink* sink) {
    RequestOptions ro;
    ro.mode = j.mode;
    ro.pinned = true;
    return pipe->Run(DocsPrompt(j.docs), ro, sink);
  };
  // Alone, twice: the first pass stores back the prefix blocks of the rows
  // it computed exactly (a later request with the same beginning serves
  // them exactly), so the second pass is the steady state.
  std::vector<CaptureSink> alone(jobs.size());
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      alone[i] = CaptureSink();
      ASSERT_TRUE(run(jobs[i], &alone[i]).ok());
    }
    pipe->DrainStoreBack();
  }
  constexpr int kThreads = 3, kRounds = 2;
  std::vector<std::vector<CaptureSink>> got(kThreads, std::vector<CaptureSink>(jobs.size()));
  std::vector<absl::Status> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (size_t i = 0; i < jobs.size(); ++i) {
          const size_t j = (i + t) % jobs.size();
          got[t][j] = CaptureSink();
          absl::StatusOr<RequestResult> r = run(jobs[j], &got[t][j]);
          if (!r.ok() && errors[t].ok()) errors[t] = r.status();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(errors[t].ok()) << errors[t];
    for (size_t j = 0; j < jobs.size(); ++j) {
      ASSERT_EQ(got[t][j].k.size(), alone[j].k.size());
      EXPECT_EQ(got[t][j].prompt.tokens, alone[j].prompt.tokens);
      for (size_t l = 0; l < alone[j].k.size(); ++l) {
        EXPECT_LT(MaxAbsDiff(got[t][j].k[l], alone[j].k[l]), 1e-4) << t << "/" << j << "/" << l;
        EXPECT_LT(MaxAbsDiff(got[t][j].v[l], alone[j].v[l]), 1e-4) << t << "/" << j << "/" << l;
      }
    }
  }
}

}  // namespace
}  // namespace ragkv::pipeline
