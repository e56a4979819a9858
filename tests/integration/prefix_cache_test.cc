// Exact prefixes are exact rows (issue 20) over real gRPC: the exact rows
// of a blend (BOS + the system prompt before the first reused chunk; under
// PREFIX_CACHING every row before the query) are stored as prefix blocks,
// and the next prompt with the same beginning is served them: loaded, never
// recomputed (mask bits 0 at every layer), equal to the rows the first
// request computed (up to the f16 of the stored records), reported in
// BlendSummary.prefix_tokens; with PREFIX_CACHING the cached prefix grows to
// cover the leading chunk, as an engine's automatic prefix caching would.
#include <cmath>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

constexpr int kBlock = 8;
const char* kSystem =
    "You are a helpful assistant. Answer the question from the stories below, briefly.";

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "test model not found at " << TestModelPath();
    services::SidecarOptions o = TestSidecarOptions(dir_.path() + "/data");
    o.prefix_block_tokens = kBlock;
    auto s = services::Sidecar::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    sidecar_ = std::move(*s);
    client_ = ClientFor(sidecar_->address());
    std::vector<v1::Document> docs(2);
    docs[0].set_doc_id("x");
    docs[0].set_text("Lily had a red ball. She played with it in the park every day.");
    docs[1].set_doc_id("y");
    docs[1].set_text("Tom had a small cat. The cat liked to sleep in the warm sun.");
    auto ing = client_->IngestDocuments(docs);
    ASSERT_TRUE(ing.ok()) << ing.status();
    x_ = ing->ingested(0).chunk_ids(0);
    y_ = ing->ingested(1).chunk_ids(0);
  }

  absl::Status Blend(uint64_t chunk, const std::string& question, v1::BlendMode mode,
                     CollectingKVSink* sink) {
    v1::BlendRequest br;
    br.add_segments()->set_text(kSystem);
    br.add_segments()->set_chunk_id(chunk);
    br.add_segments()->set_text(question);
    br.mutable_options()->set_mode(mode);
    br.mutable_options()->set_add_bos(true);
    return client_->Blend(br, sink);
  }

  // StoreChunks: both chunks' records stored (a blend that misses stores
  // them back), so that a blend reuses them and its exact rows end where
  // the first chunk starts.
  void StoreChunks() {
    for (uint64_t id : {x_, y_}) {
      bool hit = false;
      for (int i = 0; i < 100 && !hit; ++i) {
        v1::BlendRequest br;
        br.add_segments()->set_chunk_id(id);
        br.add_segments()->set_text("?");
        CollectingKVSink s;
        ASSERT_TRUE(client_->Blend(br, &s).ok());
        hit = s.info.spans[0].cache_hit;
        if (!hit) absl::SleepFor(absl::Milliseconds(20));
      }
      ASSERT_TRUE(hit) << "chunk " << id << " never stored";
    }
  }

  // BlendUntilPrefix: blends until at least `want` prefix tokens are served
  // (blocks are stored after the previous response, off its path).
  void BlendUntilPrefix(uint64_t chunk, const std::string& q, v1::BlendMode mode, uint32_t want,
                        CollectingKVSink* sink) {
    for (int i = 0; i < 100; ++i) {
      *sink = CollectingKVSink();
      ASSERT_TRUE(Blend(chunk, q, mode, sink).ok());
      if (sink->stats.prefix_tokens >= want) return;
      absl::SleepFor(absl::Milliseconds(20));
    }
    FAIL() << "prefix of " << want << " tokens never served (got " << sink->stats.prefix_tokens
           << ")";
  }

  TempDir dir_;
  std::unique_ptr<services::Sidecar> sidecar_;
  std::unique_ptr<Client> client_;
  uint64_t x_ = 0, y_ = 0;
};

// Rows [0, n) of every layer of `a` and `b` (f32 wire) agree: the first
// `stored` rows to the f16 of a stored record (|a - b| <= 2^-10 |a| +
// 1e-4), the rows after them, computed over those f16 rows, to 2^-7 |a| +
// 2e-3 (the rounding carried through the layers).
void ExpectSameRows(const CollectingKVSink& a, const CollectingKVSink& b, int64_t n,
                    int64_t stored) {
  const int64_t H = a.info.num_kv_heads, D = a.info.head_dim;
  const int64_t Ta = a.info.num_tokens, Tb = b.info.num_tokens;
  ASSERT_EQ(a.k.size(), b.k.size());
  for (size_t l = 0; l < a.k.size(); ++l) {
    for (int which = 0; which < 2; ++which) {
      const float* pa = reinterpret_cast<const float*>((which ? a.v : a.k)[l].data());
      const float* pb = reinterpret_cast<const float*>((which ? b.v : b.k)[l].data());
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t d = 0; d < D; ++d) {
            const float x = pa[(h * Ta + t) * D + d], y = pb[(h * Tb + t) * D + d];
            const float tol = t < stored ? std::fabs(x) / 1024 + 1e-4f : std::fabs(x) / 128 + 2e-3f;
            ASSERT_LE(std::fabs(x - y), tol)
                << "layer " << l << (which ? " v" : " k") << " head " << h << " row " << t;
          }
        }
      }
    }
  }
}

TEST_F(PrefixCacheTest, TheSystemPromptIsServedAsExactRowsNextTime) {
  ASSERT_NO_FATAL_FAILURE(StoreChunks());
  CollectingKVSink a;
  ASSERT_TRUE(Blend(x_, "What did Lily have?", v1::BLEND_MODE_CACHEBLEND, &a).ok());
  EXPECT_EQ(a.stats.prefix_tokens, 0u);
  const int64_t system_rows = a.info.spans[0].end;  // BOS + the system prompt
  const uint32_t want = static_cast<uint32_t>(system_rows / kBlock * kBlock);
  ASSERT_GE(want, static_cast<uint32_t>(kBlock));
  // Another chunk and question after the same system prompt.
  CollectingKVSink b;
  ASSERT_NO_FATAL_FAILURE(
      BlendUntilPrefix(y_, "Where did the cat sleep?", v1::BLEND_MODE_CACHEBLEND, want, &b));
  EXPECT_EQ(b.stats.prefix_tokens, want);  // whole blocks of the exact rows, no more
  for (size_t l = 0; l < b.mask.size(); ++l) {
    for (uint32_t t = 0; t < want; ++t) {
      ASSERT_FALSE((static_cast<uint8_t>(b.mask[l][t / 8]) >> (t % 8)) & 1u)
          << "row " << t << " recomputed at layer " << l;
    }
  }
  // The stored rows and the rest of the system prompt are what the first
  // request computed.
  ExpectSameRows(a, b, system_rows, want);
}

TEST_F(PrefixCacheTest, PrefixCachingGrowsTheCachedPrefixOverTheLeadingChunk) {
  CollectingKVSink first;
  ASSERT_TRUE(Blend(x_, "What did Lily have?", v1::BLEND_MODE_PREFIX_CACHING, &first).ok());
  // Every row before the query was prefilled exactly: all of it is stored.
  const int64_t query_begin = first.info.spans.back().begin;
  const uint32_t want = static_cast<uint32_t>(query_begin / kBlock * kBlock);
  ASSERT_GT(want, static_cast<uint32_t>(first.info.spans[0].end));  // reaches into the chunk
  CollectingKVSink again;
  ASSERT_NO_FATAL_FAILURE(
      BlendUntilPrefix(x_, "Who played in the park?", v1::BLEND_MODE_PREFIX_CACHING, want, &again));
  EXPECT_EQ(again.stats.prefix_tokens, want);
  ExpectSameRows(first, again, query_begin, want);
  // CacheBlend on the same beginning reuses it too.
  CollectingKVSink blend;
  ASSERT_TRUE(Blend(x_, "Who played?", v1::BLEND_MODE_CACHEBLEND, &blend).ok());
  EXPECT_EQ(blend.stats.prefix_tokens, want);
  ExpectSameRows(first, blend, want, want);
}

}  // namespace
}  // namespace ragkv::testing
