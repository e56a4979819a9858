// Failed loads are recomputed, not fatal (issue 20): a chunk whose stored
// KV is corrupt, truncated or behind a tier outage at some layer of the
// blend stream becomes a miss; the blend completes over real gRPC, the
// summary says which chunk failed at which layer, and the fused KV equals
// the same blend in which that chunk simply missed. The faults are injected
// by a wrapper around the real RAM, SSD (RocksDB in a temp dir) and Redis
// tiers (BackendOptions::wrap_tier), at random layers of random chunks.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kvstore/tier.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"
#include "tests/support/shared_redis.h"

namespace ragkv::testing {
namespace {

enum class Fault { kNone, kCorrupt, kTruncate, kOutage, kMiss };

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kCorrupt: return "corrupt";
    case Fault::kTruncate: return "truncate";
    case Fault::kOutage: return "outage";
    case Fault::kMiss: return "miss";
    default: return "none";
  }
}

// FaultTier: forwards to a real tier; reads of one key fail as configured:
// kCorrupt flips a byte of layer `layer`, kTruncate cuts it in half,
// kOutage answers Unavailable from layer `layer` on, kMiss hides the key.
class FaultTier : public kvstore::Tier {
 public:
  explicit FaultTier(std::shared_ptr<kvstore::Tier> base) : base_(std::move(base)) {}

  void Set(const kvstore::ChunkKey& key, Fault fault, uint32_t layer) {
    absl::MutexLock lock(&mu_);
    key_ = key;
    fault_ = fault;
    layer_ = layer;
  }

  std::string_view Name() const override { return base_->Name(); }
  kvstore::TierKind Kind() const override { return base_->Kind(); }
  absl::Status ReadChunk(const kvstore::ChunkKey& key, kvstore::ChunkReader& reader,
                         kvstore::ReadMode mode) override {
    if (Active(key, Fault::kMiss)) {
      counters().misses++;
      return absl::OkStatus();
    }
    Filter f(this, key, reader);
    absl::Status s = base_->ReadChunk(key, f, mode);
    if (f.found) {
      counters().hits++;
    } else {
      counters().misses++;
    }
    if (s.ok() && f.outage) return absl::UnavailableError("injected tier outage");
    return s;
  }
  absl::StatusOr<bool> Contains(const kvstore::ChunkKey& key) override {
    if (Active(key, Fault::kMiss)) return false;
    return base_->Contains(key);
  }
  absl::Status Put(const kvstore::ChunkKey& key,
                   std::shared_ptr<const kvstore::EncodedChunk> chunk) override {
    return base_->Put(key, std::move(chunk));
  }
  absl::Status Delete(const kvstore::ChunkKey& key) override { return base_->Delete(key); }
  absl::StatusOr<uint64_t> DeleteByFingerprint(const kvstore::Fingerprint& fp) override {
    return base_->DeleteByFingerprint(fp);
  }
  absl::Status Flush() override { return base_->Flush(); }

 private:
  // Filter: passes the base tier's blobs on, applying the fault to layer
  // `layer_` (an outage ends the read there).
  struct Filter final : kvstore::ChunkReader {
    Filter(FaultTier* t, const kvstore::ChunkKey& k, kvstore::ChunkReader& o)
        : tier(t), key(k), out(o) {}
    kvstore::LayerRange OnHeader(kvstore::PinnedBytes h) override {
      found = true;
      return out.OnHeader(std::move(h));
    }
    bool OnLayer(uint32_t layer, Blob b) override {
      if (b.has_value()) {
        absl::MutexLock lock(&tier->mu_);
        if (key == tier->key_ && layer >= tier->layer_) {
          if (tier->fault_ == Fault::kOutage) {
            outage = true;
            return false;
          }
          if (layer == tier->layer_ &&
              (tier->fault_ == Fault::kCorrupt || tier->fault_ == Fault::kTruncate)) {
            std::string bytes(b->view());
            if (tier->fault_ == Fault::kCorrupt) bytes[bytes.size() / 2] ^= 0x10;
            if (tier->fault_ == Fault::kTruncate) bytes.resize(bytes.size() / 2);
            b = kvstore::PinnedBytes::FromString(std::move(bytes));
          }
        }
      }
      return out.OnLayer(layer, std::move(b));
    }
    FaultTier* const tier;
    const kvstore::ChunkKey& key;
    kvstore::ChunkReader& out;
    bool found = false;
    bool outage = false;
  };

  bool Active(const kvstore::ChunkKey& key, Fault f) {
    absl::MutexLock lock(&mu_);
    return fault_ == f && key == key_;
  }
  std::shared_ptr<kvstore::Tier> base_;
  absl::Mutex mu_;
  kvstore::ChunkKey key_{};
  Fault fault_ = Fault::kNone;
  uint32_t layer_ = 0;
};

// LineWith: the first line of `log` containing `what` ("" if none).
std::string LineWith(const std::string& log, const std::string& what) {
  const size_t at = log.find(what);
  if (at == std::string::npos) return "";
  const size_t b = log.rfind('\n', at), e = log.find('\n', at);
  return log.substr(b == std::string::npos ? 0 : b + 1,
                    (e == std::string::npos ? log.size() : e) - (b == std::string::npos ? 0 : b + 1));
}

// ExpectLinesShareTheRequestId: the Blend's access log line, the sidecar's
// "recomputed as a miss" warning (an executor thread) and, for a corrupt
// record, the store's report (the stream's own thread) name one request id.
void ExpectLinesShareTheRequestId(const std::string& log, bool corrupt) {
  const std::string access = LineWith(log, "rpc method=/ragkv.v1.BlendService/Blend");
  const size_t at = access.find("request_id=");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string id = access.substr(at + 11);
  ASSERT_FALSE(id.empty());
  const std::string tag = "[request_id=" + id + "]";
  EXPECT_NE(LineWith(log, "recomputed as a miss").find(tag), std::string::npos) << log;
  if (corrupt) {
    EXPECT_NE(LineWith(log, "corrupt record").find(tag), std::string::npos) << log;
  }
}

class FailedLoadTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
    // CI's shared server, checked to keep nothing on disk (SharedTestRedis).
    const absl::StatusOr<std::string> redis =
        GetParam() == "redis" ? SharedTestRedis() : absl::StatusOr<std::string>("");
    RAGKV_REQUIRE_OR_SKIP(GetParam() != "redis" || (redis.ok() && !redis->empty()))
        << (redis.ok() ? std::string("RAGKV_TEST_REDIS not set") : redis.status().ToString());
    services::SidecarOptions o = TestSidecarOptions(dir_.path() + "/data");
    o.kv_tiers = {GetParam()};
    o.prefix_cache = false;  // chunk 0 leads the prompt: its rows would become prefix blocks
    if (GetParam() == "redis") o.redis_url = *redis;
    o.wrap_tier = [this](std::shared_ptr<kvstore::Tier> t) {
      tier_ = std::make_shared<FaultTier>(std::move(t));
      return tier_;
    };
    auto s = services::Sidecar::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    sidecar_ = std::move(*s);
    client_ = ClientFor(sidecar_->address());
    // Texts of this test only (content-addressed keys shared with nobody).
    const char* texts[] = {
        "Failed-load test one: the little fox ran to the river and drank the cold water.",
        "Failed-load test two: a girl named Mia found a red ball under the old tree.",
        "Failed-load test three: the sun came out and the birds sang in the garden all day."};
    std::vector<v1::Document> docs(3);
    for (int i = 0; i < 3; ++i) {
      docs[i].set_doc_id("failed-load-" + std::to_string(i));
      docs[i].set_text(texts[i]);
    }
    auto ing = client_->IngestDocuments(docs);
    ASSERT_TRUE(ing.ok()) << ing.status();
    for (int i = 0; i < 3; ++i) ids_.push_back(ing->ingested(i).chunk_ids(0));
    auto chunks = client_->GetChunks(ids_);
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    const std::string fp = sidecar_fingerprint();
    for (const auto& c : chunks->chunks()) {
      std::vector<int32_t> t(c.token_ids().begin(), c.token_ids().end());
      kvstore::Fingerprint f;
      std::memcpy(f.data(), fp.data(), f.size());
      keys_.push_back(kvstore::ChunkKey::Of(f, t));
    }
  }

  // sidecar_fingerprint: the served model's, from a first blend's header.
  std::string sidecar_fingerprint() {
    CollectingKVSink sink;
    EXPECT_TRUE(Blend(&sink).ok());  // the first blend: all misses, stored back after
    return sink.info.model_fingerprint;
  }

  absl::Status Blend(CollectingKVSink* sink) {
    v1::BlendRequest br;
    for (uint64_t id : ids_) br.add_segments()->set_chunk_id(id);
    br.add_segments()->set_text("Who found the ball?");
    br.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
    br.mutable_options()->set_recompute_ratio(0.3f);
    return client_->Blend(br, sink);
  }

  // WaitStored: every chunk hits again (store-back rewrites what a fault
  // made the store delete).
  void WaitStored() {
    for (int i = 0; i < 200; ++i) {
      CollectingKVSink s;
      ASSERT_TRUE(Blend(&s).ok());
      int hits = 0;
      for (const auto& sp : s.info.spans) hits += sp.is_chunk && sp.cache_hit;
      if (hits == 3 && s.stats.failed_loads.empty()) return;
      absl::SleepFor(absl::Milliseconds(25));
    }
    FAIL() << "chunks not stored back";
  }

  TempDir dir_;
  std::shared_ptr<FaultTier> tier_;
  std::unique_ptr<services::Sidecar> sidecar_;
  std::unique_ptr<Client> client_;
  std::vector<uint64_t> ids_;
  std::vector<kvstore::ChunkKey> keys_;
};

TEST_P(FailedLoadTest, AFailedChunkIsRecomputedAsAMissAtAnyLayer) {
  std::mt19937 rng(20 + static_cast<int>(GetParam().size()));
  // Random layers, plus the last one: the loader runs at most two layers
  // ahead, so by then layers were streamed and the client must drop them.
  const struct {
    Fault fault;
    bool last;
  } trials[] = {{Fault::kCorrupt, false}, {Fault::kTruncate, false}, {Fault::kOutage, false},
                {Fault::kCorrupt, false}, {Fault::kTruncate, true},  {Fault::kOutage, true}};
  for (const auto& trial : trials) {
    const Fault fault = trial.fault;
    ASSERT_NO_FATAL_FAILURE(WaitStored());
    const int c = static_cast<int>(rng() % 3);
    CollectingKVSink probe;
    ASSERT_TRUE(Blend(&probe).ok());
    const uint32_t L = probe.info.num_layers;
    const uint32_t layer = trial.last ? L - 1 : rng() % L;
    SCOPED_TRACE(::testing::Message() << GetParam() << " " << FaultName(fault) << " chunk " << c
                                    << " layer " << layer);
    tier_->Set(keys_[c], fault, layer);
    CollectingKVSink got;
    ::testing::internal::CaptureStderr();
    absl::Status s = Blend(&got);
    const std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(s.ok()) << s;
    if (layer > 0) ExpectLinesShareTheRequestId(log, fault != Fault::kOutage);
    ASSERT_TRUE(got.got_summary);
    if (layer == 0) {
      // The source opens on the chunk's first layer: a record failing there
      // is a plain miss of the store (verified, reported, deleted).
      EXPECT_TRUE(got.stats.failed_loads.empty());
      EXPECT_FALSE(got.info.spans[c].cache_hit);
    } else {
      ASSERT_EQ(got.stats.failed_loads.size(), 1u);
      const FailedLoadInfo& f = got.stats.failed_loads[0];
      EXPECT_EQ(f.chunk_id, ids_[c]);
      EXPECT_EQ(f.span, static_cast<uint32_t>(c));
      EXPECT_EQ(f.layer, layer);
      EXPECT_FALSE(f.reason.empty());
    }
    EXPECT_LE(got.restarts, 1);
    if (trial.last) {
      EXPECT_EQ(got.restarts, 1);
    }
    ASSERT_EQ(got.k.size(), L);  // layers of the restarted blend only
    // The reference: the same blend with that chunk a plain miss.
    tier_->Set(keys_[c], Fault::kMiss, 0);
    CollectingKVSink want;
    ASSERT_TRUE(Blend(&want).ok());
    tier_->Set(keys_[c], Fault::kNone, 0);
    EXPECT_TRUE(want.stats.failed_loads.empty());
    ASSERT_EQ(want.k.size(), L);
    for (uint32_t l = 0; l < L; ++l) {
      EXPECT_EQ(got.mask[l], want.mask[l]) << "layer " << l;
      ASSERT_EQ(got.k[l].size(), want.k[l].size());
      const float* gk = reinterpret_cast<const float*>(got.k[l].data());
      const float* wk = reinterpret_cast<const float*>(want.k[l].data());
      const float* gv = reinterpret_cast<const float*>(got.v[l].data());
      const float* wv = reinterpret_cast<const float*>(want.v[l].data());
      for (size_t i = 0; i < got.k[l].size() / sizeof(float); ++i) {
        ASSERT_NEAR(gk[i], wk[i], 1e-4f) << "layer " << l << " k[" << i << "]";
        ASSERT_NEAR(gv[i], wv[i], 1e-4f) << "layer " << l << " v[" << i << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, FailedLoadTest, ::testing::Values("ram", "ssd", "redis"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ragkv::testing
