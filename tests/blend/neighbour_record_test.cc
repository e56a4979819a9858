// Neighbour-aware records (issue 40; docs/kv_format.md "Neighbour-aware
// records"): the rows are those of an independent full prefill of
// [lead + neighbours + chunk], the Blender rotates them once from their
// stored first position to their prompt offset (checked against a
// double-precision naive RoPE), and a store never serves one as a plain
// record.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "blend/blender.h"
#include "blend/kv_source.h"
#include "blend/store_source.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_key.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/ram_tier.h"
#include "kvstore/tiered_store.h"
#include "tests/blend/blend_test_util.h"

namespace ragkv::blend {
namespace {

using kernels::DType;
using testing::MaxAbsDiff;
using testing::NaiveRerotate;
using testing::RandomTokens;
using testing::SmallModel;

class NeighbourRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = SmallModel();
    std::mt19937 rng(40);
    ctx_.lead = {1};
    ctx_.neighbours = {RandomTokens(&rng, 11, 300), RandomTokens(&rng, 7, 300)};
    chunk_ = RandomTokens(&rng, 13, 300);
  }

  // Layer l's K and V rows [begin, begin + n) of a cache, f32 [H][n][D].
  std::pair<std::vector<float>, std::vector<float>> Rows(const model::KVCache& c, int l,
                                                         int64_t begin, int64_t n) {
    const auto& cfg = model_->config();
    std::vector<float> k(static_cast<size_t>(cfg.n_kv_heads) * n * cfg.head_dim), v(k.size());
    EXPECT_TRUE(c.ExportLayer(l, begin, n, DType::kF32, k.data(), v.data()).ok());
    return {std::move(k), std::move(v)};
  }

  std::unique_ptr<model::Model> model_;
  NeighbourContext ctx_;
  std::vector<int32_t> chunk_;
};

// The record's rows equal the chunk's rows of one plain prefill of the whole
// context followed by the chunk (f32 KV; the only difference allowed is the
// batching of the two prefills: 1e-5).
TEST_F(NeighbourRecordTest, RowsEqualAnIndependentFullPrefill) {
  const std::vector<int32_t> context = ctx_.Tokens();
  ASSERT_EQ(context.size(), 19u);
  auto rec = PrecomputeChunkInContext(*model_, context, chunk_, DType::kF32);
  ASSERT_TRUE(rec.ok()) << rec.status();
  const int64_t P = 19, T = static_cast<int64_t>(chunk_.size());
  EXPECT_EQ(rec->info.first_position, P);
  EXPECT_EQ(rec->info.num_tokens, T);
  std::vector<int32_t> all = context;
  all.insert(all.end(), chunk_.begin(), chunk_.end());
  auto cache = model_->NewCache(static_cast<int64_t>(all.size()));
  ASSERT_TRUE(cache.ok());
  model::Workspace ws;
  ASSERT_TRUE(model_->Prefill(all, &*cache, &ws, model::LogitsMode::kNone, nullptr).ok());
  const int64_t n = static_cast<int64_t>(model_->config().n_kv_heads) * T *
                    model_->config().head_dim;
  for (int l = 0; l < model_->config().n_layers; ++l) {
    auto [k, v] = Rows(*cache, l, P, T);
    EXPECT_LT(MaxAbsDiff(reinterpret_cast<const float*>(rec->k[l].data()), k.data(), n), 1e-5)
        << "layer " << l;
    EXPECT_LT(MaxAbsDiff(reinterpret_cast<const float*>(rec->v[l].data()), v.data(), n), 1e-5)
        << "layer " << l;
  }
  // And they differ from the chunk alone (the context is in them).
  auto alone = PrecomputeChunk(*model_, chunk_, DType::kF32);
  ASSERT_TRUE(alone.ok());
  EXPECT_GT(MaxAbsDiff(reinterpret_cast<const float*>(alone->v[1].data()),
                       reinterpret_cast<const float*>(rec->v[1].data()), n),
            1e-3);
  EXPECT_EQ(PrecomputeChunkInContext(*model_, {}, chunk_, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Placed at offset L != P (full reuse: no row recomputed), the fused cache
// holds the record's keys rotated by L - P (naive double-precision RoPE)
// and its values unchanged: one rotation, from the stored first position.
TEST_F(NeighbourRecordTest, BlenderRotatesFromTheStoredFirstPosition) {
  auto rec = PrecomputeChunkInContext(*model_, ctx_.Tokens(), chunk_, DType::kF32);
  ASSERT_TRUE(rec.ok()) << rec.status();
  const int64_t P = rec->info.first_position, T = rec->info.num_tokens;
  std::mt19937 rng(41);
  for (int prefix_len : {1, 5, 19, 40}) {  // offsets below, at and above P
    const std::vector<int32_t> prefix = RandomTokens(&rng, prefix_len, 300);
    const std::vector<int32_t> query = RandomTokens(&rng, 3, 300);
    InMemoryKvSource src(&*rec);
    const std::vector<BlendSegment> segs = {{SegmentKind::kPrefix, prefix, nullptr},
                                            {SegmentKind::kChunk, chunk_, &src},
                                            {SegmentKind::kQuery, query, nullptr}};
    auto blender = Blender::Create({model_.get()});
    ASSERT_TRUE(blender.ok());
    BlendOptions o;
    o.strategy = Strategy::kFullReuse;
    auto r = (*blender)->Blend(segs, o);
    ASSERT_TRUE(r.ok()) << r.status();
    const auto& cfg = model_->config();
    const int64_t n = static_cast<int64_t>(cfg.n_kv_heads) * T * cfg.head_dim;
    for (int l = 0; l < cfg.n_layers; ++l) {
      std::vector<float> want_k(n);
      std::memcpy(want_k.data(), rec->k[l].data(), n * sizeof(float));
      for (int64_t row = 0; row < cfg.n_kv_heads * T; ++row) {
        NaiveRerotate(want_k.data() + row * cfg.head_dim, cfg.head_dim, prefix_len - P,
                      cfg.rope_theta);
      }
      auto [k, v] = Rows(r->cache, l, prefix_len, T);
      EXPECT_LT(MaxAbsDiff(k.data(), want_k.data(), n), 1e-4) << "L=" << prefix_len;
      EXPECT_EQ(MaxAbsDiff(v.data(), reinterpret_cast<const float*>(rec->v[l].data()), n), 0.0);
    }
  }
}

class NeighbourStoreTest : public NeighbourRecordTest {
 protected:
  void SetUp() override {
    NeighbourRecordTest::SetUp();
    std::vector<std::shared_ptr<kvstore::Tier>> tiers;
    tiers.push_back(kvstore::CreateRamTier({}).value());
    store_ = kvstore::TieredStore::Create({}, tiers).value();
  }
  std::unique_ptr<kvstore::TieredStore> store_;
};

// A plain lookup never returns a neighbour record (its own key), and a
// record whose header names another context is refused by name even under
// the key asked for.
TEST_F(NeighbourStoreTest, NeverServedAsAPlainRecord) {
  const kvstore::Fingerprint fp = model_->fingerprint();
  auto bytes = PrecomputeAndStoreWithNeighbours(*model_, store_.get(), ctx_, chunk_);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const kvstore::ChunkKey plain = kvstore::ChunkKey::Of(fp, chunk_);
  const kvstore::ChunkKey nkey = NeighbourKeyOf(fp, ctx_, chunk_);
  ASSERT_NE(plain, nkey);
  // The plain key: a miss.
  auto miss = StoreKvSource::Open(store_.get(), plain, fp);
  ASSERT_TRUE(miss.ok()) << miss.status();
  EXPECT_EQ(*miss, nullptr);
  // The neighbour key read as a plain record: refused by name.
  auto wrong = StoreKvSource::Open(store_.get(), nkey, fp);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("a neighbours record"), std::string::npos)
      << wrong.status();
  // Read as what it is: first position = the context's length, rows intact.
  auto ok = StoreKvSource::Open(store_.get(), nkey, fp, 2, kvstore::RecordContext::kNeighbours);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_NE(*ok, nullptr);
  EXPECT_EQ((*ok)->info().first_position, 19);
  EXPECT_EQ((*ok)->info().num_tokens, static_cast<int64_t>(chunk_.size()));
  auto rec = PrecomputeChunkInContext(*model_, ctx_.Tokens(), chunk_, DType::kF32);
  ASSERT_TRUE(rec.ok());
  const auto& cfg = model_->config();
  const int64_t T = rec->info.num_tokens, n = int64_t{cfg.n_kv_heads} * T * cfg.head_dim;
  std::vector<float> k(n), v(n);
  for (int l = 0; l < cfg.n_layers; ++l) {
    auto dk = kernels::TensorView::Contiguous(k.data(), DType::kF32, {cfg.n_kv_heads, T, cfg.head_dim});
    auto dv = kernels::TensorView::Contiguous(v.data(), DType::kF32, {cfg.n_kv_heads, T, cfg.head_dim});
    ASSERT_TRUE((*ok)->ReadLayer(l, dk, dv).ok());
    EXPECT_EQ(MaxAbsDiff(k.data(), reinterpret_cast<const float*>(rec->k[l].data()), n), 0.0);
    EXPECT_EQ(MaxAbsDiff(v.data(), reinterpret_cast<const float*>(rec->v[l].data()), n), 0.0);
  }
  // A plain record asked for as a neighbour one: refused too.
  ASSERT_TRUE(PrecomputeAndStore(*model_, store_.get(), chunk_).ok());
  auto plain_as_nbr =
      StoreKvSource::Open(store_.get(), plain, fp, 2, kvstore::RecordContext::kNeighbours);
  EXPECT_EQ(plain_as_nbr.status().code(), absl::StatusCode::kFailedPrecondition);
}

// A writer that puts a neighbour record under the plain key (a bug, or a
// forged record): the header still names its context, and the plain reader
// refuses it rather than serve rows computed in another context.
TEST_F(NeighbourStoreTest, ForgedRecordUnderThePlainKeyIsRefused) {
  const kvstore::Fingerprint fp = model_->fingerprint();
  auto rec = PrecomputeChunkInContext(*model_, ctx_.Tokens(), chunk_, DType::kF32);
  ASSERT_TRUE(rec.ok());
  // EncodeForStore refuses rows that do not start at position 0.
  EXPECT_EQ(EncodeForStore(*rec).status().code(), absl::StatusCode::kInvalidArgument);
  // Forge it by hand: plain key, neighbours header.
  kvstore::KvChunkHeader h;
  h.fingerprint = fp;
  h.key = kvstore::ChunkKey::Of(fp, chunk_);
  h.dtype = DType::kF32;
  h.num_layers = rec->info.num_layers;
  h.num_kv_heads = rec->info.kv_heads;
  h.head_dim = rec->info.head_dim;
  h.tokens = chunk_;
  h.context = kvstore::RecordContext::kNeighbours;
  h.first_position = 19;
  std::vector<kernels::TensorView> ks, vs;
  for (int l = 0; l < rec->info.num_layers; ++l) {
    ks.push_back(rec->LayerK(l));
    vs.push_back(rec->LayerV(l));
  }
  auto enc = kvstore::EncodeChunk(&h, ks, vs);
  ASSERT_TRUE(enc.ok()) << enc.status();
  ASSERT_TRUE(
      store_->Put(h.key, std::make_shared<const kvstore::EncodedChunk>(std::move(*enc))).ok());
  auto s = StoreKvSource::Open(store_.get(), h.key, fp);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("requested as a chunk-local one"), std::string::npos)
      << s.status();
  // The encoder refuses a record whose rows were not computed after this context.
  NeighbourContext other = ctx_;
  other.neighbours.pop_back();
  EXPECT_EQ(EncodeNeighbourRecord(*rec, other).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ragkv::blend
