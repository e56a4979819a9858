// The sidecar's fused-cache pool (model/kv_cache_pool.h) over real gRPC: a
// blend built in the memory a longer prompt's blend left behind streams
// exactly the bytes the same blend streams from a sidecar without a pool
// (fresh memory), and /metrics counts the reuse. Store-back and the prefix
// cache are off so that every run of a prompt computes the same rows.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

const char* kTexts[] = {
    "Lily had a red ball. She played with it in the park every day.",
    "Tom had a small cat. The cat liked to sleep in the warm sun.",
    "Once upon a time there was a little dog named Max. Max liked to run and jump.",
    "One day he found a big stick in the garden and showed it to his friend Sue.",
    "Sue laughed and threw the stick far away, and Max ran after it very fast."};

// PoolSidecar: a sidecar keeping `pool_bytes` of fused caches, with the
// texts above ingested.
class PoolSidecar {
 public:
  PoolSidecar(const std::string& dir, uint64_t pool_bytes) {
    services::SidecarOptions o = TestSidecarOptions(dir);
    o.store_back = false;
    o.prefix_cache = false;
    o.fused_cache_pool_bytes = pool_bytes;
    auto s = services::Sidecar::Start(o);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return;
    sidecar_ = std::move(*s);
    client_ = ClientFor(sidecar_->address());
    std::vector<v1::Document> docs(5);
    for (int i = 0; i < 5; ++i) {
      docs[i].set_doc_id(std::to_string(i));
      docs[i].set_text(kTexts[i]);
    }
    auto ing = client_->IngestDocuments(docs);
    EXPECT_TRUE(ing.ok()) << ing.status();
    if (!ing.ok()) return;
    for (int i = 0; i < 5; ++i) ids_.push_back(ing->ingested(i).chunk_ids(0));
  }
  bool ok() const { return ids_.size() == 5; }

  absl::Status Blend(const std::vector<int>& chunks, CollectingKVSink* sink) {
    v1::BlendRequest br;
    for (int c : chunks) br.add_segments()->set_chunk_id(ids_[c]);
    br.add_segments()->set_text("Who had a ball?");
    br.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
    br.mutable_options()->set_add_bos(true);
    return client_->Blend(br, sink);
  }

  std::string Metrics() {
    httplib::Client http("127.0.0.1", sidecar_->metrics_port());
    auto res = http.Get("/metrics");
    return res ? res->body : "";
  }

  // WaitIdle: the pool holds memory again (a blend's cache goes back after
  // its response, off the client's path).
  void WaitIdle() {
    for (int i = 0; i < 200; ++i) {
      const std::string m = Metrics();
      if (m.find("ragkv_fused_cache_pool_idle_bytes 0\n") == std::string::npos &&
          m.find("ragkv_fused_cache_pool_idle_bytes") != std::string::npos) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "the pool never got the cache back";
  }

 private:
  std::unique_ptr<services::Sidecar> sidecar_;
  std::unique_ptr<Client> client_;
  std::vector<uint64_t> ids_;
};

TEST(FusedCachePoolTest, ReusedMemoryStreamsTheSameFusedKv) {
  RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
  TempDir dir;
  const std::vector<int> prompt = {0, 1}, longer = {2, 3, 4, 0, 1};
  PoolSidecar fresh(dir.path() + "/fresh", 0), pooled(dir.path() + "/pooled", 1 << 30);
  ASSERT_TRUE(fresh.ok() && pooled.ok());
  CollectingKVSink want, big, got;
  absl::Status st = fresh.Blend(prompt, &want);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(fresh.Metrics().find("ragkv_fused_cache_pool"), std::string::npos);  // no pool
  st = pooled.Blend(longer, &big);
  ASSERT_TRUE(st.ok()) << st;
  pooled.WaitIdle();
  st = pooled.Blend(prompt, &got);  // in the longer prompt's leftover memory
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_GT(big.info.num_tokens, got.info.num_tokens);
  ASSERT_EQ(want.k.size(), got.k.size());
  for (size_t l = 0; l < want.k.size(); ++l) {
    EXPECT_EQ(want.k[l], got.k[l]) << "layer " << l;
    EXPECT_EQ(want.v[l], got.v[l]) << "layer " << l;
  }
  pooled.WaitIdle();
  const std::string m = pooled.Metrics();
  EXPECT_NE(m.find("ragkv_fused_cache_pool_creates_total{result=\"reused\"} 1\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("ragkv_fused_cache_pool_creates_total{result=\"allocated\"} 1\n"),
            std::string::npos);
}

}  // namespace
}  // namespace ragkv::testing
