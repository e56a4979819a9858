// Learning from traffic and tenant salts in the request pipeline: a raw
// prompt's passages are served as documents (stored back on a miss, found
// again at another offset and in another order, with the same fused KV as
// the same prompt sent as document segments), and a cache_salt keeps a
// tenant's documents, passages and exact-prefix blocks to itself.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvstore/chunk_key.h"
#include "pipeline/pipeline.h"
#include "tests/pipeline/pipeline_fixture.h"

namespace ragkv::pipeline {
namespace {

class PassagesTest : public PipelineTest {
 protected:
  // RawPrompt: `lead` random tokens, then docs `which` with `gap` random
  // tokens after each, then the query; the docs are the passages.
  Prompt RawPrompt(std::vector<int> which, int lead, int gap, uint32_t seed) const {
    std::mt19937 rng(seed);
    Prompt p;
    p.raw = RandomTokens(&rng, lead);
    for (int i : which) {
      const auto b = static_cast<uint32_t>(p.raw.size());
      p.raw.insert(p.raw.end(), docs_[i].begin(), docs_[i].end());
      p.passages.emplace_back(b, static_cast<uint32_t>(p.raw.size()));
      const std::vector<int32_t> g = RandomTokens(&rng, gap);
      p.raw.insert(p.raw.end(), g.begin(), g.end());
    }
    p.raw.insert(p.raw.end(), query_.begin(), query_.end());
    p.raw_query_tokens = query_.size();
    return p;
  }

  // Hits: whether each passage's span was served from the store.
  static std::vector<bool> Hits(const CaptureSink& sink) {
    std::vector<bool> out;
    for (const Span& s : sink.prompt.spans) {
      if (s.is_chunk) out.push_back(s.cache_hit);
    }
    return out;
  }

  kvstore::ChunkKey Key(int doc, const std::string& salt = "") const {
    return kvstore::ChunkKey::Of(kvstore::SaltedFingerprint(model_->fingerprint(), salt),
                                 docs_[doc]);
  }
};

// Passages the store has not seen are computed and stored back; the next
// prompt that holds them at other offsets, in the other order, is served
// from the store.
TEST_F(PassagesTest, PassagesAreLearnedAndFoundAtAnyOffset) {
  auto pipe = Make();  // no retriever: passages need no catalogue
  CaptureSink first;
  auto a = pipe->Run(RawPrompt({4, 5}, 5, 3, 1), RequestOptions{}, &first);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Hits(first), (std::vector<bool>{false, false}));
  pipe->DrainStoreBack();
  EXPECT_TRUE(store_->Contains(Key(4)));
  EXPECT_TRUE(store_->Contains(Key(5)));
  CaptureSink second;
  auto b = pipe->Run(RawPrompt({5, 4}, 11, 6, 2), RequestOptions{}, &second);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Hits(second), (std::vector<bool>{true, true}));
  EXPECT_EQ(b->tiers.size(), 2u);
}

// A raw prompt with passages gives the same fused KV as the same tokens sent
// as segments with the passages as documents (f32 KV; 1e-5).
TEST_F(PassagesTest, PassagesGiveTheSameKvAsDocumentSegments) {
  StoreDocs(3);
  auto pipe = Make();
  const Prompt raw = RawPrompt({1, 0, 2}, 4, 5, 3);
  Prompt segs;
  uint32_t at = 0;
  for (const auto& [b, e] : raw.passages) {
    if (b > at) segs.segments.emplace_back().tokens.assign(raw.raw.begin() + at, raw.raw.begin() + b);
    Segment& d = segs.segments.emplace_back();
    d.tokens.assign(raw.raw.begin() + b, raw.raw.begin() + e);
    d.document = true;
    at = e;
  }
  segs.segments.emplace_back().tokens.assign(raw.raw.begin() + at, raw.raw.end());
  RequestOptions ro;
  ro.ratio = 0.3;
  ro.pinned = true;
  CaptureSink x, y;
  ASSERT_TRUE(pipe->Run(raw, ro, &x).ok());
  ASSERT_TRUE(pipe->Run(segs, ro, &y).ok());
  EXPECT_EQ(x.prompt.tokens, y.prompt.tokens);
  EXPECT_EQ(Hits(x), (std::vector<bool>{true, true, true}));
  ASSERT_EQ(x.k.size(), y.k.size());
  for (size_t l = 0; l < x.k.size(); ++l) {
    EXPECT_LT(MaxAbsDiff(x.k[l], y.k[l]), 1e-5) << l;
    EXPECT_LT(MaxAbsDiff(x.v[l], y.v[l]), 1e-5) << l;
    EXPECT_EQ(x.recomputed[l], y.recomputed[l]) << l;
  }
}

// A salted request's passages are stored under its salt only: neither an
// unsalted request nor another salt finds them; the same salt does.
TEST_F(PassagesTest, ASaltKeepsPassagesToItsTenant) {
  auto pipe = Make();
  auto run = [&](const std::string& salt, uint32_t seed) {
    RequestOptions ro;
    ro.cache_salt = salt;
    CaptureSink sink;
    auto r = pipe->Run(RawPrompt({3}, 6, 2, seed), ro, &sink);
    EXPECT_TRUE(r.ok()) << r.status();
    pipe->DrainStoreBack();
    return Hits(sink);
  };
  EXPECT_EQ(run("tenant-a", 1), std::vector<bool>{false});
  EXPECT_TRUE(store_->Contains(Key(3, "tenant-a")));
  EXPECT_FALSE(store_->Contains(Key(3)));
  EXPECT_EQ(run("tenant-b", 2), std::vector<bool>{false});
  EXPECT_EQ(run("tenant-a", 3), std::vector<bool>{true});
  EXPECT_EQ(run("", 4), std::vector<bool>{false});
  EXPECT_TRUE(store_->Contains(Key(3)));  // the unsalted request stored its own
  EXPECT_NE(Key(3, "tenant-a"), Key(3, "tenant-b"));
}

// Exact-prefix blocks are keyed under the salt: a repeated prompt is served
// from its stored prefix only to the tenant that stored it.
TEST_F(PassagesTest, ASaltKeepsThePrefixCacheToItsTenant) {
  auto pipe = Make();
  RequestOptions ro;
  ro.mode = Mode::kPrefixReuse;
  auto prefix_rows = [&](const std::string& salt) {
    ro.cache_salt = salt;
    CaptureSink sink;
    auto r = pipe->Run(DocsPrompt({0, 2, 3}), ro, &sink);
    EXPECT_TRUE(r.ok()) << r.status();
    pipe->DrainStoreBack();
    return r.ok() ? r->prefix_tokens : -1;
  };
  EXPECT_EQ(prefix_rows("a"), 0);
  EXPECT_EQ(prefix_rows(""), 0);
  EXPECT_EQ(prefix_rows("b"), 0);
  EXPECT_EQ(prefix_rows("a"), 64);
  EXPECT_EQ(prefix_rows(""), 64);
}

// not_found_when_cold: a prompt of which nothing is stored is NOT_FOUND
// before the sink sees anything, and its passages are stored all the same;
// once one is stored the request blends.
TEST_F(PassagesTest, AColdPromptIsNotFoundAndStillLearned) {
  auto pipe = Make();
  RequestOptions ro;
  ro.not_found_when_cold = true;
  CaptureSink cold;
  auto r = pipe->Run(RawPrompt({1, 2}, 4, 3, 7), ro, &cold);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_TRUE(cold.prompt.tokens.empty());
  EXPECT_TRUE(cold.k.empty());
  pipe->DrainStoreBack();
  EXPECT_TRUE(store_->Contains(Key(1)));
  EXPECT_TRUE(store_->Contains(Key(2)));
  CaptureSink warm;
  auto w = pipe->Run(RawPrompt({2, 1, 5}, 6, 2, 8), ro, &warm);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(Hits(warm), (std::vector<bool>{true, true, false}));
}

TEST_F(PassagesTest, BadPassagesAndSaltsAreRefusedByName) {
  auto pipe = Make();
  CaptureSink sink;
  auto refused = [&](const Prompt& p, const RequestOptions& ro, const std::string& word) {
    auto r = pipe->Run(p, ro, &sink);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(std::string(r.status().message()).find(word), std::string::npos) << r.status();
  };
  Prompt overlap = RawPrompt({0, 1}, 3, 2, 1);
  overlap.passages[1].first = overlap.passages[0].second - 1;
  refused(overlap, {}, "passage 1");
  Prompt into_query = RawPrompt({0}, 3, 0, 1);
  into_query.passages[0].second += 1;
  refused(into_query, {}, "query");
  Prompt with_segments = DocsPrompt({0});
  with_segments.passages.emplace_back(0, 4);
  refused(with_segments, {}, "raw prompt");
  RequestOptions long_salt;
  long_salt.cache_salt.assign(kMaxSaltBytes + 1, 's');
  refused(DocsPrompt({0}), long_salt, "cache_salt");
  // Without passages and without a catalogue a raw prompt still needs one.
  Prompt bare = RawPrompt({}, 8, 0, 1);
  EXPECT_EQ(pipe->Run(bare, {}, &sink).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ragkv::pipeline
