// Neighbour-aware records in the product path (issue 40): the precompute
// pass writes one per catalogue chunk under its own key, a pipeline with
// Options::neighbour_records serves them (their rows, not the plain ones),
// falls back to the plain record when one is absent (counted), and a
// pipeline without the option never reads them.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "blend/kv_source.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "pipeline/neighbour_records.h"
#include "pipeline/pipeline.h"
#include "retrieval/retriever.h"
#include "tests/pipeline/pipeline_fixture.h"

namespace ragkv::pipeline {
namespace {

class NeighbourRecordsTest : public PipelineTest {
 protected:
  void SetUp() override {
    PipelineTest::SetUp();
    char tmpl[] = "/tmp/ragkv_nbr_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    retrieval::RetrieverOptions ro;
    ro.dir = dir_;
    ro.sync_writes = false;
    auto r = retrieval::Retriever::Create(ro);
    ASSERT_TRUE(r.ok()) << r.status();
    retriever_ = std::move(r).value();
    // Short texts (one byte-token chunk each) that share words pairwise.
    const std::vector<std::string> texts = {"red apple pie", "green apple tart",
                                            "blue river boat", "blue sea boat"};
    for (size_t i = 0; i < texts.size(); ++i) {
      ASSERT_TRUE(
          retriever_->Ingest({retrieval::Document{"d" + std::to_string(i), "", texts[i]}}).ok());
      auto d = retriever_->GetDocument("d" + std::to_string(i));
      ASSERT_TRUE(d.ok() && d->has_value());
      ASSERT_EQ((*d)->chunk_ids.size(), 1u);
      ids_.push_back((*d)->chunk_ids[0]);
      tokens_.push_back(retriever_->GetChunk(ids_.back()).value()->token_ids);
    }
  }
  void TearDown() override {
    retriever_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<Pipeline> MakeWith(int neighbours) {
    Pipeline::Options o;
    o.model = model_.get();
    o.blender = blender_.get();
    o.store = store_.get();
    o.retriever = retriever_.get();
    o.store_back = false;
    o.neighbour_records = neighbours;
    auto p = Pipeline::Create(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::move(p).value();
  }

  Prompt ChunksPrompt(std::vector<int> which) const {
    Prompt p;
    for (int i : which) {
      Segment& s = p.segments.emplace_back();
      s.source = Segment::Source::kChunkId;
      s.chunk_id = static_cast<uint64_t>(ids_[i]);
    }
    p.segments.emplace_back().tokens = query_;
    return p;
  }

  // V rows of layer `l` at prompt rows [off, off + T) as delivered, against
  // `rec`'s (full reuse: every cached value is served as stored).
  double VDiff(const CaptureSink& sink, int l, int64_t off, const blend::ChunkKV& rec) {
    const auto& c = model_->config();
    const int64_t total = static_cast<int64_t>(sink.prompt.tokens.size());
    const int64_t T = rec.info.num_tokens;
    double m = 0;
    for (int h = 0; h < c.n_kv_heads; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        for (int d = 0; d < c.head_dim; ++d) {
          const float got = sink.v[l][(h * total + off + t) * c.head_dim + d];
          const float want = reinterpret_cast<const float*>(rec.v[l].data())[(h * T + t) * c.head_dim + d];
          m = std::max(m, std::fabs(double(got) - want));
        }
      }
    }
    return m;
  }

  std::string dir_;
  std::unique_ptr<retrieval::Retriever> retriever_;
  std::vector<int64_t> ids_;
  std::vector<std::vector<int32_t>> tokens_;
};

TEST_F(NeighbourRecordsTest, PrecomputedServedAndFallenBackFrom) {
  // Plain records of every chunk, then the neighbour pass (k = 1).
  for (const auto& t : tokens_) ASSERT_TRUE(blend::PrecomputeAndStore(*model_, store_.get(), t).ok());
  RequestOptions ro;
  ro.mode = Mode::kFullReuse;
  ro.pinned = true;
  // Before the pass: no neighbour list recorded, every chunk falls back.
  {
    auto none = NeighbourContextOf(*retriever_, nullptr, ids_[0], 1);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_FALSE(none->has_value());
    CaptureSink sink;
    auto r = MakeWith(1)->Run(ChunksPrompt({0, 2}), ro, &sink);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->neighbour_records, 0);
    EXPECT_EQ(r->neighbour_fallbacks, 2);
  }
  NeighbourPrecomputeOptions no;
  no.model = model_.get();
  no.retriever = retriever_.get();
  no.store = store_.get();
  no.neighbours = 1;
  auto st = PrecomputeNeighbourRecords(no);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->chunks, 4);
  EXPECT_EQ(st->computed, 4);
  EXPECT_EQ(st->failed, 0) << (st->failures.empty() ? "" : st->failures[0].reason);
  uint64_t all_tokens = 0;  // every chunk computed: chunk_tokens is their sum
  for (const auto& t : tokens_) all_tokens += t.size();
  EXPECT_EQ(st->chunk_tokens, all_tokens);
  auto again = PrecomputeNeighbourRecords(no);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->skipped, 4);  // resumable: stored records are not recomputed
  EXPECT_EQ(again->computed, 0);
  EXPECT_EQ(again->chunk_tokens, 0u);

  // The records the pass wrote, rebuilt independently: chunk 0's nearest is
  // chunk 1 (shared "apple"), chunk 2's is chunk 3.
  auto ctx0 = NeighbourContextOf(*retriever_, nullptr, ids_[0], 1);
  ASSERT_TRUE(ctx0.ok() && ctx0->has_value());
  ASSERT_EQ((*ctx0)->neighbours.size(), 1u);
  EXPECT_EQ((*ctx0)->neighbours[0], tokens_[1]);
  EXPECT_TRUE((*ctx0)->lead.empty());  // no tokenizer: no BOS
  // The recorded list is NearestChunks' (the unbatched reference).
  for (size_t i = 0; i < ids_.size(); ++i) {
    auto list = retriever_->ChunkNeighbours(ids_[i], 1);
    auto ref = retriever_->NearestChunks(ids_[i], 1);
    ASSERT_TRUE(list.ok() && list->has_value() && ref.ok());
    ASSERT_EQ((*list)->size(), 1u);
    EXPECT_EQ((**list)[0], (*ref)[0].chunk_id) << "chunk " << i;
  }
  auto rec0 = blend::PrecomputeChunkInContext(*model_, (*ctx0)->Tokens(), tokens_[0],
                                              kernels::DType::kF32);
  ASSERT_TRUE(rec0.ok());
  auto plain0 = blend::PrecomputeChunk(*model_, tokens_[0], kernels::DType::kF32);
  ASSERT_TRUE(plain0.ok());

  {
    CaptureSink sink;
    auto r = MakeWith(1)->Run(ChunksPrompt({0, 2}), ro, &sink);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->neighbour_records, 2);
    EXPECT_EQ(r->neighbour_fallbacks, 0);
    ASSERT_GE(sink.prompt.spans.size(), 2u);
    const int64_t off = sink.prompt.spans[0].begin;
    for (int l = 1; l < model_->config().n_layers; ++l) {
      EXPECT_EQ(VDiff(sink, l, off, *rec0), 0.0) << "layer " << l;
      EXPECT_GT(VDiff(sink, l, off, *plain0), 1e-4) << "layer " << l;
    }
  }
  // Chunk 0's neighbour record gone: the plain one, counted as a fallback.
  ASSERT_TRUE(store_->Delete(blend::NeighbourKeyOf(model_->fingerprint(), **ctx0, tokens_[0])).ok());
  {
    CaptureSink sink;
    auto r = MakeWith(1)->Run(ChunksPrompt({0, 2}), ro, &sink);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->neighbour_records, 1);
    EXPECT_EQ(r->neighbour_fallbacks, 1);
    const int64_t off = sink.prompt.spans[0].begin;
    EXPECT_EQ(VDiff(sink, 2, off, *plain0), 0.0);
  }
  // A chunk-local record forged under the neighbour key: refused by its
  // header, and the request falls back to the plain record (not an error).
  {
    auto forged = blend::EncodeForStoreAs(
        *plain0, blend::NeighbourKeyOf(model_->fingerprint(), **ctx0, tokens_[0]));
    ASSERT_TRUE(forged.ok()) << forged.status();
    ASSERT_TRUE(store_->Put(forged->key, forged->chunk).ok());
    CaptureSink sink;
    auto r = MakeWith(1)->Run(ChunksPrompt({0, 2}), ro, &sink);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->neighbour_records, 1);
    EXPECT_EQ(r->neighbour_fallbacks, 1);
    EXPECT_EQ(VDiff(sink, 2, sink.prompt.spans[0].begin, *plain0), 0.0);
  }
  // Without the option: plain records only, nothing counted.
  {
    CaptureSink sink;
    auto r = MakeWith(0)->Run(ChunksPrompt({2}), ro, &sink);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->neighbour_records, 0);
    EXPECT_EQ(r->neighbour_fallbacks, 0);
    auto plain2 = blend::PrecomputeChunk(*model_, tokens_[2], kernels::DType::kF32);
    ASSERT_TRUE(plain2.ok());
    EXPECT_EQ(VDiff(sink, 2, sink.prompt.spans[0].begin, *plain2), 0.0);
  }
}

TEST_F(NeighbourRecordsTest, CancelStopsBetweenChunksAndProgressCounts) {
  NeighbourPrecomputeOptions no;
  no.model = model_.get();
  no.retriever = retriever_.get();
  no.store = store_.get();
  no.neighbours = 1;
  int polls = 0;
  no.cancelled = [&polls] { return ++polls > 2; };  // two chunks, then stop
  std::vector<int64_t> seen;  // computed + skipped + failed, per report
  no.on_progress = [&seen](const NeighbourPrecomputeStats& s) {
    EXPECT_EQ(s.chunks, 4);
    seen.push_back(s.computed + s.skipped + s.failed);
  };
  auto st = PrecomputeNeighbourRecords(no);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->cancelled);
  EXPECT_EQ(st->computed, 2);
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2}));
  // Resumed without a cancel, on three workers: the two stored records are
  // skipped, the other two computed once each (the same keys as one worker's).
  no.cancelled = nullptr;
  no.on_progress = nullptr;
  no.workers = 3;
  auto rest = PrecomputeNeighbourRecords(no);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_FALSE(rest->cancelled);
  EXPECT_EQ(rest->skipped, 2);
  EXPECT_EQ(rest->computed, 2);
  no.workers = 1;
  auto all = PrecomputeNeighbourRecords(no);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->skipped, 4);
}

}  // namespace
}  // namespace ragkv::pipeline
