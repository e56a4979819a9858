// Store-back (issue 20, "fresh KV is stored back") over real gRPC: chunks a
// blend computed fresh because their record missed are stored after the
// response, as precompute would have stored them, so the next blend hits;
// --store-back=false keeps them misses.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "blend/kv_source.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_key.h"
#include "model/loader.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

// Start: a sidecar whose catalogue holds two documents and whose store
// holds none of their KV (ingested, never precomputed); the chunks' tokens.
struct Fixture {
  TempDir dir;
  std::unique_ptr<services::Sidecar> sidecar;
  std::unique_ptr<Client> client;
  std::vector<uint64_t> ids;
  std::vector<std::vector<int32_t>> tokens;

  void Start(bool store_back, const std::string& kv_codec = "raw") {
    services::SidecarOptions o = TestSidecarOptions(dir.path() + "/data");
    o.store_back = store_back;
    o.kv_codec = kv_codec;
    auto s = services::Sidecar::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    sidecar = std::move(*s);
    client = ClientFor(sidecar->address());
    std::vector<v1::Document> docs(2);
    docs[0].set_doc_id("a");
    docs[0].set_text("Once upon a time there was a little girl named Lily. She loved to play.");
    docs[1].set_doc_id("b");
    docs[1].set_text("One day a big dog came to the park and wanted to play with the ball.");
    auto ing = client->IngestDocuments(docs);
    ASSERT_TRUE(ing.ok()) << ing.status();
    ids = {ing->ingested(0).chunk_ids(0), ing->ingested(1).chunk_ids(0)};
    auto chunks = client->GetChunks(ids);
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    for (const auto& c : chunks->chunks()) tokens.emplace_back(c.token_ids().begin(), c.token_ids().end());
  }
  // WaitForHits: polls until both chunks are stored back (off the response's
  // path); returns the hits seen last.
  int WaitForHits() {
    int hits = 0;
    for (int i = 0; i < 100 && hits < 2; ++i) {
      absl::SleepFor(absl::Milliseconds(50));
      hits = Hits();
    }
    return hits;
  }
  // Stored: the model (loaded once) and the record GetChunk returns for
  // chunk `t` under its content key.
  absl::StatusOr<StoredChunk> Stored(const std::vector<int32_t>& t) {
    if (model == nullptr) {
      model::LoadOptions lo;
      lo.max_seq_len = 512;
      auto m = model::LoadModel(TestModelPath(), lo);
      if (!m.ok()) return m.status();
      model = std::move(*m);
    }
    const kvstore::ChunkKey key = kvstore::ChunkKey::Of(model->fingerprint(), t);
    return client->GetChunk(std::string(key.AsBytes()));
  }
  std::unique_ptr<model::Model> model;

  // Hits: how many of the two chunks a full-reuse blend found in the store.
  int Hits() {
    v1::BlendRequest br;
    for (uint64_t id : ids) br.add_segments()->set_chunk_id(id);
    br.add_segments()->set_text("What did they play?");
    br.mutable_options()->set_mode(v1::BLEND_MODE_FULL_REUSE);
    CollectingKVSink sink;
    absl::Status s = client->Blend(br, &sink);
    EXPECT_TRUE(s.ok()) << s;
    int hits = 0;
    for (const FusedSpan& sp : sink.info.spans) hits += sp.is_chunk && sp.cache_hit;
    return hits;
  }
};

TEST(StoreBackTest, ChunksComputedFreshAreStoredAsPrecomputeWouldStoreThem) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.Start(/*store_back=*/true));
  EXPECT_EQ(f.Hits(), 0);  // the first blend computes both fresh
  EXPECT_EQ(f.WaitForHits(), 2);
  // The stored record is precompute's: the chunk alone at positions 0.., in
  // the model's KV dtype, under its content key.
  for (const auto& t : f.tokens) {
    auto got = f.Stored(t);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = blend::PrecomputeChunk(*f.model, t);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(got->layers.size(), want->k.size());
    for (size_t l = 0; l < want->k.size(); ++l) {
      EXPECT_EQ(got->layers[l].k(), std::string(want->k[l].begin(), want->k[l].end())) << l;
      EXPECT_EQ(got->layers[l].v(), std::string(want->v[l].begin(), want->v[l].end())) << l;
    }
  }
}

// --kv-codec fp8: the stored-back record is the fp8 one. GetChunk decodes
// it to f32, within the codec's bound of precompute's f16 KV
// (max(|x| 2^-4, scale 2^-10) per element, scale = the head's max |x| / 448).
TEST(StoreBackTest, RecordsAreWrittenWithTheServersCodec) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.Start(/*store_back=*/true, "fp8"));
  EXPECT_EQ(f.Hits(), 0);
  EXPECT_EQ(f.WaitForHits(), 2);
  for (const auto& t : f.tokens) {
    auto got = f.Stored(t);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = blend::PrecomputeChunk(*f.model, t, kernels::DType::kF32);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->header.layout().dtype(), v1::DTYPE_F32);  // decoded, not raw
    const int64_t H = want->info.kv_heads, per = want->info.num_tokens * want->info.head_dim;
    bool any_rounded = false;
    for (size_t l = 0; l < want->k.size(); ++l) {
      for (int which = 0; which < 2; ++which) {
        const auto& wb = which == 0 ? want->k[l] : want->v[l];
        const std::string& gb = which == 0 ? got->layers[l].k() : got->layers[l].v();
        ASSERT_EQ(gb.size(), wb.size());
        const float* w = reinterpret_cast<const float*>(wb.data());
        const float* g = reinterpret_cast<const float*>(gb.data());
        for (int64_t h = 0; h < H; ++h) {
          float amax = 0;
          for (int64_t i = h * per; i < (h + 1) * per; ++i) amax = std::max(amax, std::fabs(w[i]));
          for (int64_t i = h * per; i < (h + 1) * per; ++i) {
            // f16 rounding of precompute's KV (2^-11 relative) on top of fp8's.
            const float bound =
                std::max(std::fabs(w[i]) * (1.f / 16 + 1.f / 1024), amax / 448.f / 1024.f * 1.01f);
            ASSERT_LE(std::fabs(g[i] - w[i]), bound) << "layer " << l << " h" << h << " i" << i;
            any_rounded |= g[i] != w[i];
          }
        }
      }
    }
    EXPECT_TRUE(any_rounded);
  }
}

// --kv-codec int4: the stored-back record decodes within int4's bound. Each
// group of 32 has |err| <= step / 2 with step ~ (max - min) / 15 of the group,
// so the head's whole span bounds it (plus f16 rounding of lo and step and of
// precompute's KV).
TEST(StoreBackTest, Int4RecordsDecodeWithinTheCodecsBound) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.Start(/*store_back=*/true, "int4"));
  EXPECT_EQ(f.WaitForHits(), 2);
  for (const auto& t : f.tokens) {
    auto got = f.Stored(t);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = blend::PrecomputeChunk(*f.model, t, kernels::DType::kF32);
    ASSERT_TRUE(want.ok()) << want.status();
    const int64_t H = want->info.kv_heads, per = want->info.num_tokens * want->info.head_dim;
    bool any_rounded = false;
    for (size_t l = 0; l < want->k.size(); ++l) {
      for (int which = 0; which < 2; ++which) {
        const auto& wb = which == 0 ? want->k[l] : want->v[l];
        const std::string& gb = which == 0 ? got->layers[l].k() : got->layers[l].v();
        ASSERT_EQ(gb.size(), wb.size());
        const float* w = reinterpret_cast<const float*>(wb.data());
        const float* g = reinterpret_cast<const float*>(gb.data());
        for (int64_t h = 0; h < H; ++h) {
          float mn = w[h * per], mx = w[h * per];
          for (int64_t i = h * per; i < (h + 1) * per; ++i) mn = std::min(mn, w[i]), mx = std::max(mx, w[i]);
          const float amax = std::max(std::fabs(mn), std::fabs(mx));
          const float bound = (mx - mn) / 15.f / 2.f * 1.01f + amax / 512.f;
          for (int64_t i = h * per; i < (h + 1) * per; ++i) {
            ASSERT_LE(std::fabs(g[i] - w[i]), bound) << "layer " << l << " h" << h << " i" << i;
            any_rounded |= g[i] != w[i];
          }
        }
      }
    }
    EXPECT_TRUE(any_rounded);
  }
}

TEST(StoreBackTest, OffKeepsMissesMisses) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.Start(/*store_back=*/false));
  EXPECT_EQ(f.Hits(), 0);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(f.Hits(), 0);
}

}  // namespace
}  // namespace ragkv::testing
