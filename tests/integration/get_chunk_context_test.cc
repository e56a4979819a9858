// GetChunk never serves a record computed in another context as a plain one
// (docs/kv_format.md "Neighbour-aware records"): the wire header has no
// record context, so a neighbours record found under a plain chunk key (a
// forged or mis-keyed write) is refused by name, over real gRPC on
// 127.0.0.1 with the stories260K model.
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "blend/kv_source.h"
#include "blend/store_source.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_key.h"
#include "kvstore/kv_chunk.h"
#include "model/loader.h"
#include "model/model.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

// ForgedUnder: `kv` (computed in a context: first_position > 0) encoded
// as a neighbours record whose header names `key`.
std::shared_ptr<const kvstore::EncodedChunk> ForgedUnder(const blend::ChunkKV& kv,
                                                         const kvstore::ChunkKey& key) {
  kvstore::KvChunkHeader h;
  h.context = kvstore::RecordContext::kNeighbours;
  h.first_position = static_cast<uint32_t>(kv.info.first_position);
  h.fingerprint = kv.info.fingerprint;
  h.key = key;
  h.dtype = kv.info.dtype;
  h.num_layers = static_cast<uint32_t>(kv.info.num_layers);
  h.num_kv_heads = static_cast<uint32_t>(kv.info.kv_heads);
  h.head_dim = static_cast<uint32_t>(kv.info.head_dim);
  h.tokens = kv.tokens;
  std::vector<kernels::TensorView> ks, vs;
  for (int l = 0; l < kv.info.num_layers; ++l) {
    ks.push_back(kv.LayerK(l));
    vs.push_back(kv.LayerV(l));
  }
  auto enc = kvstore::EncodeChunk(&h, ks, vs);
  EXPECT_TRUE(enc.ok()) << enc.status();
  return std::make_shared<const kvstore::EncodedChunk>(std::move(*enc));
}

TEST(GetChunkContextTest, ANeighboursRecordUnderAPlainKeyIsRefusedByName) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  TempDir dir;
  services::SidecarOptions o = TestSidecarOptions(dir.path() + "/data");
  o.kv_tiers = {"ram"};
  o.services = {"kvstore"};
  std::shared_ptr<kvstore::Tier> ram;  // the sidecar's own RAM tier, written behind its back
  o.wrap_tier = [&ram](std::shared_ptr<kvstore::Tier> t) {
    ram = t;
    return t;
  };
  auto s = services::Sidecar::Start(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(ram, nullptr);
  auto client = ClientFor((*s)->address());
  model::LoadOptions lo;
  lo.max_seq_len = 512;
  auto m = model::LoadModel(TestModelPath(), lo);
  ASSERT_TRUE(m.ok()) << m.status();
  const model::Model& model = **m;

  const std::vector<int32_t> tokens = {1, 300, 301, 302, 303, 304, 305, 306};
  blend::NeighbourContext ctx;
  ctx.neighbours = {{1, 50, 51, 52, 53, 54}};
  const kvstore::ChunkKey plain = kvstore::ChunkKey::Of(model.fingerprint(), tokens);

  // The control: the plain record under the plain key is served.
  auto kv = blend::PrecomputeChunk(model, tokens);
  ASSERT_TRUE(kv.ok()) << kv.status();
  auto enc = blend::EncodeForStore(*kv);
  ASSERT_TRUE(enc.ok()) << enc.status();
  ASSERT_EQ(enc->key, plain);
  ASSERT_TRUE(ram->Put(plain, enc->chunk).ok());
  auto got = client->GetChunk(std::string(plain.AsBytes()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->layers.size(), static_cast<size_t>(model.config().n_layers));

  // The same tokens computed after a neighbour, its header naming that
  // context but keyed as the plain record (what a buggy writer would store;
  // a record whose header names another key is dropped by the tier as
  // corrupt, so only this forgery reaches GetChunk's context check).
  auto in_ctx =
      blend::PrecomputeChunkInContext(model, ctx.Tokens(), tokens, model.config().kv_dtype);
  ASSERT_TRUE(in_ctx.ok()) << in_ctx.status();
  ASSERT_TRUE(ram->Put(plain, ForgedUnder(*in_ctx, plain)).ok());
  auto refused = client->GetChunk(std::string(plain.AsBytes()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "chunk-local")) << refused.status();

  // Nothing lost: the record stays stored (refused, not dropped as corrupt),
  // and the server keeps serving.
  auto held = ram->Contains(plain);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(*held);
  auto has = client->Contains({std::string(plain.AsBytes())});
  ASSERT_TRUE(has.ok()) << has.status();
  EXPECT_TRUE((*has)[0]);
}

}  // namespace
}  // namespace ragkv::testing
