// First-position records (Pipeline::Options::first_position_records): the
// prompt's first chunk, right after an exact prefix, served from its KV
// computed right after exactly that prefix. Real RAM-tier store, real
// store-back; the reference is the pipeline's own full prefill of the same
// prompt (f32 KV).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "tests/pipeline/pipeline_fixture.h"

namespace ragkv::pipeline {
namespace {

class FirstPositionTest : public PipelineTest {
 protected:
  void SetUp() override {
    PipelineTest::SetUp();
    std::mt19937 rng(23);
    system_a_ = RandomTokens(&rng, 9);
    system_b_ = RandomTokens(&rng, 9);
    StoreDocs(3);
  }

  std::unique_ptr<Pipeline> MakeFirstPosition() {
    Pipeline::Options o;
    o.model = model_.get();
    o.blender = blender_.get();
    o.store = store_.get();
    o.cache_pool = &pool_;
    o.first_position_records = true;
    // Off here: fresh or fully prefilled rows stored as exact-prefix blocks
    // would cover the first chunk in later requests (served exact by that
    // cache, so no first-position record is read or written for it).
    o.prefix_cache.enabled = false;
    auto p = Pipeline::Create(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::move(p).value();
  }

  // A prompt: the system tokens (fresh), then documents `which`, the query.
  Prompt WithSystem(const std::vector<int32_t>& system, std::vector<int> which) const {
    Prompt p = DocsPrompt(std::move(which));
    Segment s;
    s.tokens = system;
    p.segments.insert(p.segments.begin(), s);
    return p;
  }

  kvstore::ChunkKey KeyAfter(const std::vector<int32_t>& lead, int doc,
                             const kvstore::Fingerprint& fp) const {
    blend::NeighbourContext c;
    c.lead = lead;
    return blend::NeighbourKeyOf(fp, c, docs_[doc]);
  }

  // RowsDiff: the largest |difference| of rows [begin, end) of K and V at
  // layers >= 1 between two captures of one prompt.
  static double RowsDiff(const CaptureSink& a, const CaptureSink& b, const model::ModelConfig& cfg,
                         int64_t T, int64_t begin, int64_t end) {
    const int hd = cfg.head_dim, H = cfg.n_kv_heads;
    double m = 0;
    for (size_t l = 1; l < a.k.size(); ++l) {
      for (int h = 0; h < H; ++h) {
        for (int64_t t = begin; t < end; ++t) {
          for (int d = 0; d < hd; ++d) {
            const size_t i = (static_cast<size_t>(h) * T + t) * hd + d;
            m = std::max({m, std::fabs(double(a.k[l][i]) - b.k[l][i]),
                          std::fabs(double(a.v[l][i]) - b.v[l][i])});
          }
        }
      }
    }
    return m;
  }

  CaptureSink RunMode(Pipeline* pipe, const Prompt& p, Mode mode, RequestResult* res = nullptr) {
    RequestOptions ro;
    ro.mode = mode;
    CaptureSink sink;
    auto r = pipe->Run(p, ro, &sink);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok() && res != nullptr) *res = *r;
    return sink;
  }

  std::vector<int32_t> system_a_, system_b_;
};

// A miss uses the plain record and store-back writes the first-position
// record; the next request serves it, and the first chunk's rows are then
// full prefill's at every layer (they were not with the plain record).
TEST_F(FirstPositionTest, StoreBackWritesItAndItsRowsAreExact) {
  auto pipe = MakeFirstPosition();
  const Prompt p = WithSystem(system_a_, {0, 1, 2});
  const kvstore::ChunkKey key = KeyAfter(system_a_, 0, model_->fingerprint());
  ASSERT_FALSE(store_->Contains(key));
  RequestResult first;
  const CaptureSink plain = RunMode(pipe.get(), p, Mode::kFullReuse, &first);
  EXPECT_EQ(first.first_position_records, 0);
  pipe->DrainStoreBack();
  EXPECT_TRUE(store_->Contains(key));
  // Only the first chunk gets one.
  EXPECT_FALSE(store_->Contains(KeyAfter(system_a_, 1, model_->fingerprint())));

  RequestResult second;
  const CaptureSink served = RunMode(pipe.get(), p, Mode::kFullReuse, &second);
  EXPECT_EQ(second.first_position_records, 1);
  const CaptureSink full = RunMode(pipe.get(), p, Mode::kFullPrefill);
  const int64_t T = static_cast<int64_t>(system_a_.size() + AllTokens({0, 1, 2}).size());
  const int64_t b = static_cast<int64_t>(system_a_.size());
  const int64_t e = b + static_cast<int64_t>(docs_[0].size());
  // f32 KV: one prefill of system + chunk against one of the whole prompt;
  // the GEMM shapes differ, so the rows agree to float rounding, not bits.
  EXPECT_LT(RowsDiff(served, full, model_->config(), T, b, e), 1e-4);
  // The plain record's rows are off (the check above could fail).
  EXPECT_GT(RowsDiff(plain, full, model_->config(), T, b, e), 1e-2);
}

// The record is found only right after the same prefix: another system
// prompt, the chunk in second place, no prefix at all, or another salt
// never read it.
TEST_F(FirstPositionTest, OnlyTheSamePrefixFindsIt) {
  auto pipe = MakeFirstPosition();
  RunMode(pipe.get(), WithSystem(system_a_, {0, 1}), Mode::kFullReuse);
  pipe->DrainStoreBack();
  RequestResult r;
  RunMode(pipe.get(), WithSystem(system_a_, {0, 1}), Mode::kFullReuse, &r);
  ASSERT_EQ(r.first_position_records, 1);

  RunMode(pipe.get(), WithSystem(system_b_, {0, 1}), Mode::kFullReuse, &r);
  EXPECT_EQ(r.first_position_records, 0);
  RunMode(pipe.get(), WithSystem(system_a_, {1, 0}), Mode::kFullReuse, &r);
  EXPECT_EQ(r.first_position_records, 0);
  RunMode(pipe.get(), DocsPrompt({0, 1}), Mode::kFullReuse, &r);  // no prefix: plain is exact
  EXPECT_EQ(r.first_position_records, 0);
  // A salted request: its documents' plain records are stored back by the
  // first, its first-position record by the second (the unsalted one is
  // never read), and the third reads it.
  RequestOptions salted;
  salted.mode = Mode::kFullReuse;
  salted.cache_salt = "tenant-a";
  const kvstore::Fingerprint fp = kvstore::SaltedFingerprint(model_->fingerprint(), "tenant-a");
  for (int i = 0; i < 3; ++i) {
    CaptureSink sink;
    auto s = pipe->Run(WithSystem(system_a_, {0, 1}), salted, &sink);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->first_position_records, i == 2 ? 1 : 0) << "salted request " << i;
    EXPECT_EQ(store_->Contains(KeyAfter(system_a_, 0, fp)), i == 2) << "salted request " << i;
    pipe->DrainStoreBack();
  }
}

// Served only when read and only beside the plain record: full prefill
// does not count it, and deleting the chunk's content key (what deleting a
// document or forgetting a passage does) retires it.
TEST_F(FirstPositionTest, CountedWhenReadAndRetiredWithThePlainRecord) {
  auto pipe = MakeFirstPosition();
  const Prompt p = WithSystem(system_a_, {0, 1});
  RunMode(pipe.get(), p, Mode::kFullReuse);
  pipe->DrainStoreBack();
  RequestResult r;
  RunMode(pipe.get(), p, Mode::kFullPrefill, &r);
  EXPECT_EQ(r.first_position_records, 0);
  RunMode(pipe.get(), p, Mode::kCacheBlend, &r);
  EXPECT_EQ(r.first_position_records, 1);
  ASSERT_TRUE(store_->Delete(kvstore::ChunkKey::Of(model_->fingerprint(), docs_[0])).ok());
  RunMode(pipe.get(), p, Mode::kFullReuse, &r);
  EXPECT_EQ(r.first_position_records, 0);
  EXPECT_TRUE(store_->Contains(KeyAfter(system_a_, 0, model_->fingerprint())));  // never read
}

// A chunk-local record put under the first-position key (a writer's bug)
// is refused by its header, deleted, and the request is served from the
// plain record.
TEST_F(FirstPositionTest, ARecordOfAnotherContextIsRefusedAndDeleted) {
  auto pipe = MakeFirstPosition();
  const kvstore::ChunkKey key = KeyAfter(system_a_, 0, model_->fingerprint());
  auto kv = blend::PrecomputeChunk(*model_, docs_[0]);
  ASSERT_TRUE(kv.ok()) << kv.status();
  auto enc = blend::EncodeForStoreAs(*kv, key);
  ASSERT_TRUE(enc.ok()) << enc.status();
  ASSERT_TRUE(store_->Put(key, enc->chunk).ok());
  RequestResult r;
  const CaptureSink got = RunMode(pipe.get(), WithSystem(system_a_, {0, 1}), Mode::kFullReuse, &r);
  EXPECT_EQ(r.first_position_records, 0);
  EXPECT_TRUE(got.prompt.spans[1].cache_hit);  // the plain record
  pipe->DrainStoreBack();
  // Deleted, then written anew by store-back as a first-position record.
  RunMode(pipe.get(), WithSystem(system_a_, {0, 1}), Mode::kFullReuse, &r);
  EXPECT_EQ(r.first_position_records, 1);
}

}  // namespace
}  // namespace ragkv::pipeline
