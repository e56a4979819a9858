// retriever_settings_test.cc: a directory opened with other settings than
// it was built with (RetrieverOptions::on_setting_change): refused with
// every change named, re-embedded or re-indexed when asked, and a re-embed
// cut midway finished or refused, never served as either embedder's vectors.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "retrieval/embedder.h"
#include "retrieval/retriever.h"
#include "tests/retrieval/test_util.h"

namespace ragkv::retrieval {
namespace {

using testing::ChunkIds;
using testing::SmallCorpus;
using testing::TempDir;
RetrieverOptions Options(const std::string& dir) { return testing::SmallRetrieverOptions(dir); }

constexpr int kToyDim = 8;

// ToyEmbedder: one-hot at bucket (text length * mul) % 8, so that two
// versions (another `mul`) embed the same texts differently. Fails its
// `fail_call`-th EmbedDocuments call (0: never).
std::shared_ptr<Embedder> ToyEmbedder(const std::string& name, int mul, int fail_call = 0) {
  auto calls = std::make_shared<int>(0);
  return std::make_shared<FunctionEmbedder>(
      kToyDim, name, [=](absl::Span<const std::string> texts) -> absl::StatusOr<std::vector<float>> {
        if (++*calls == fail_call) return absl::UnavailableError("toy embedder down");
        std::vector<float> v;
        for (const std::string& t : texts) {
          for (int i = 0; i < kToyDim; ++i) v.push_back(i == static_cast<int>(t.size() * mul % kToyDim) ? 1.f : 0.f);
        }
        return v;
      });
}

absl::StatusOr<std::unique_ptr<Retriever>> OpenToy(const std::string& dir, std::shared_ptr<Embedder> e,
                                                   RetrieverOptions::SettingChange policy =
                                                       RetrieverOptions::SettingChange::kUpgrade) {
  RetrieverOptions o = Options(dir);
  o.embedder = std::move(e);
  o.index.dim = kToyDim;
  o.on_setting_change = policy;
  return Retriever::Create(o);
}

// ByBucket: for each one-hot query vector, the chunk ids found and their
// scores: what a directory's stored vectors answer.
std::vector<std::vector<std::pair<int64_t, float>>> ByBucket(const Retriever& r) {
  std::vector<std::vector<std::pair<int64_t, float>>> out;
  SearchOptions so;
  so.k = 1000;
  for (int j = 0; j < kToyDim; ++j) {
    std::vector<float> q(kToyDim, 0.f);
    q[j] = 1.f;
    std::vector<std::pair<int64_t, float>> hits;
    const std::vector<SearchResult> found = r.SearchByVector(q, so).value();
    for (const SearchResult& h : found) {
      if (h.score > 0.5f) hits.emplace_back(h.chunk_id, h.score);
    }
    std::sort(hits.begin(), hits.end());
    out.push_back(std::move(hits));
  }
  return out;
}

// ManyDocs: n one-chunk documents of varied lengths (n > 256: a re-embed
// takes several batches).
std::vector<Document> ManyDocs(int n) {
  std::vector<Document> docs;
  for (int i = 0; i < n; ++i) {
    docs.push_back({absl::StrCat("d", i), "", absl::StrCat("note ", i, std::string(i % 11, 'x'))});
  }
  return docs;
}

// An embedder upgrade (another text embedder's fingerprint): reopening
// re-embeds every chunk from the catalogue, and search then equals a fresh
// ingest under the new embedder; refused when re-embedding is turned off or
// the vectors came from the caller.
TEST(Retriever, ReembedsWhenTheTextEmbedderChanges) {
  TempDir dir, fresh;
  auto with_seed = [](const std::string& d, uint64_t seed) {
    RetrieverOptions o = Options(d);
    o.embedder = HashedEmbedder::Create({.dim = 512, .seed = seed}).value();
    o.index.dim = 512;
    return o;
  };
  {
    auto r = Retriever::Create(with_seed(dir.path(), 1)).value();
    ASSERT_TRUE(r->Ingest(SmallCorpus()).ok());
  }
  RetrieverOptions o = with_seed(dir.path(), 2);
  o.on_setting_change = RetrieverOptions::SettingChange::kRefuse;
  EXPECT_EQ(Retriever::Create(o).status().code(), absl::StatusCode::kFailedPrecondition);
  // Another seed is another embedder, not an upgrade: refused by default,
  // naming both fingerprints.
  o.on_setting_change = RetrieverOptions::SettingChange::kUpgrade;
  absl::Status refused = Retriever::Create(o).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.message()).find("seed=1"), std::string::npos) << refused;
  EXPECT_NE(std::string(refused.message()).find("seed=2"), std::string::npos) << refused;
  EXPECT_EQ(refused.GetPayload(kSettingsRefused), absl::Cord("changed")) << refused;
  o.on_setting_change = RetrieverOptions::SettingChange::kRebuild;
  auto ref = Retriever::Create(with_seed(fresh.path(), 2)).value();
  ASSERT_TRUE(ref->Ingest(SmallCorpus()).ok());
  SearchOptions so;
  so.k = 5;
  so.mode = SearchMode::kDense;
  for (int round = 0; round < 2; ++round) {  // re-embed, then a plain reopen
    auto r = Retriever::Create(o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const char* q : {"Oxford college", "stage play 1635", "village in Indonesia"}) {
      auto got = (*r)->Search(q, so);
      auto want = ref->Search(q, so);
      ASSERT_TRUE(got.ok() && want.ok());
      EXPECT_EQ(ChunkIds(*got), ChunkIds(*want)) << q << " round " << round;
      for (size_t i = 0; i < got->size() && i < want->size(); ++i) {
        EXPECT_FLOAT_EQ((*got)[i].score, (*want)[i].score) << q;
      }
    }
  }
}

TEST(Retriever, RefusesAnotherConfiguration) {
  TempDir dir;
  {
    auto r = Retriever::Create(Options(dir.path())).value();
    ASSERT_TRUE(r->Ingest(SmallCorpus()).ok());
  }
  RetrieverOptions o = Options(dir.path());
  o.chunker.target_tokens = 128;
  EXPECT_EQ(Retriever::Create(o).status().code(), absl::StatusCode::kFailedPrecondition);
  o = Options(dir.path());
  o.embedder = HashedEmbedder::Create({.dim = 256}).value();
  o.on_setting_change = RetrieverOptions::SettingChange::kRefuse;
  EXPECT_EQ(Retriever::Create(o).status().code(), absl::StatusCode::kFailedPrecondition);
  o = Options(dir.path());
  o.index.factory = "NotAFactory";
  EXPECT_EQ(Retriever::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// Another index factory: refused (both named) unless asked to rebuild; the
// rebuilt index then answers as a fresh ingest under that factory, also
// after a plain reopen, and the old setting is refused in turn.
TEST(Retriever, RebuildsTheIndexForAnotherFactoryOnlyWhenAsked) {
  TempDir dir, fresh;
  auto with_factory = [](const std::string& d, const char* factory) {
    RetrieverOptions o = Options(d);
    o.index.factory = factory;
    return o;
  };
  {
    auto r = Retriever::Create(with_factory(dir.path(), "Flat")).value();
    ASSERT_TRUE(r->Ingest(SmallCorpus()).ok());
  }
  RetrieverOptions o = with_factory(dir.path(), "HNSW32");
  absl::Status refused = Retriever::Create(o).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.message()).find("'Flat,metric=0', now 'HNSW32,metric=0'"), std::string::npos) << refused;
  o.on_setting_change = RetrieverOptions::SettingChange::kRebuild;
  auto ref = Retriever::Create(with_factory(fresh.path(), "HNSW32")).value();
  ASSERT_TRUE(ref->Ingest(SmallCorpus()).ok());
  SearchOptions so;
  so.k = 5;
  so.mode = SearchMode::kDense;
  for (int round = 0; round < 2; ++round) {  // rebuild, then a plain reopen
    auto r = Retriever::Create(round == 0 ? o : with_factory(dir.path(), "HNSW32"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->index().options().factory, "HNSW32");
    EXPECT_EQ((*r)->stats().indexed_vectors, ref->stats().indexed_vectors);
    for (const char* q : {"Oxford college", "stage play 1635", "village in Indonesia"}) {
      auto got = (*r)->Search(q, so);
      auto want = ref->Search(q, so);
      ASSERT_TRUE(got.ok() && want.ok());
      EXPECT_EQ(ChunkIds(*got).size(), ChunkIds(*want).size()) << q;
      ASSERT_FALSE(got->empty());
      EXPECT_EQ((*got)[0].doc_id, (*want)[0].doc_id) << q << " round " << round;
    }
  }
  EXPECT_EQ(Retriever::Create(with_factory(dir.path(), "Flat")).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// An embedder whose version alone changed is re-embedded by default: the
// stored vectors then answer as a fresh ingest under the new version (which
// embeds differently from the old), and other embedders are refused.
TEST(Retriever, EmbedderVersionUpgradeReembedsByDefault) {
  TempDir dir, fresh, old;
  ASSERT_TRUE(OpenToy(dir.path(), ToyEmbedder("toy-v1:dim=8", 1)).value()->Ingest(SmallCorpus()).ok());
  auto v1 = OpenToy(old.path(), ToyEmbedder("toy-v1:dim=8", 1)).value();
  ASSERT_TRUE(v1->Ingest(SmallCorpus()).ok());
  auto v2 = OpenToy(fresh.path(), ToyEmbedder("toy-v2:dim=8", 3)).value();
  ASSERT_TRUE(v2->Ingest(SmallCorpus()).ok());
  ASSERT_NE(ByBucket(*v1), ByBucket(*v2)) << "the two versions must embed differently";
  {
    auto up = OpenToy(dir.path(), ToyEmbedder("toy-v2:dim=8", 3));  // upgrade
    ASSERT_TRUE(up.ok()) << up.status();
    EXPECT_EQ(ByBucket(**up), ByBucket(*v2));
  }
  EXPECT_EQ(ByBucket(*OpenToy(dir.path(), ToyEmbedder("toy-v2:dim=8", 3)).value()), ByBucket(*v2));
  EXPECT_EQ(OpenToy(dir.path(), ToyEmbedder("toy-v3:dim=9", 3)).status().code(),
            absl::StatusCode::kFailedPrecondition);  // parameters
  EXPECT_EQ(OpenToy(dir.path(), ToyEmbedder("other-v2:dim=8", 3)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A re-embed cut after its first batch (the new embedder fails on the
// second) leaves vectors of both embedders: the old embedder is refused
// naming the unfinished re-embed, the new one finishes it, and kRebuild
// with the old one re-embeds everything back. Either way the result equals
// a fresh ingest.
TEST(Retriever, InterruptedReembedIsFinishedOrRefusedNeverServedMixed) {
  TempDir dir, fresh_v1, fresh_v2;
  const std::vector<Document> docs = ManyDocs(300);
  auto v1 = ToyEmbedder("toy-v1:dim=8", 1);
  ASSERT_TRUE(OpenToy(dir.path(), v1).value()->Ingest(docs).ok());
  auto ref1 = OpenToy(fresh_v1.path(), v1).value();
  ASSERT_TRUE(ref1->Ingest(docs).ok());
  auto ref2 = OpenToy(fresh_v2.path(), ToyEmbedder("toy-v2:dim=8", 3)).value();
  ASSERT_TRUE(ref2->Ingest(docs).ok());

  absl::Status cut = OpenToy(dir.path(), ToyEmbedder("toy-v2:dim=8", 3, /*fail_call=*/2)).status();
  EXPECT_EQ(cut.code(), absl::StatusCode::kUnavailable) << cut;
  for (auto policy : {RetrieverOptions::SettingChange::kUpgrade, RetrieverOptions::SettingChange::kRefuse}) {
    absl::Status refused = OpenToy(dir.path(), v1, policy).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_NE(std::string(refused.message()).find("unfinished re-embed to 'function:toy-v2:dim=8'"),
              std::string::npos) << refused;
    EXPECT_EQ(refused.GetPayload(kSettingsRefused), absl::Cord("reembed")) << refused;
  }
  {
    auto back = OpenToy(dir.path(), v1, RetrieverOptions::SettingChange::kRebuild);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(ByBucket(**back), ByBucket(*ref1));
  }
  ASSERT_TRUE(OpenToy(dir.path(), v1).ok());  // settled under v1
  // Cut again, then finished by the target embedder under the default policy.
  EXPECT_FALSE(OpenToy(dir.path(), ToyEmbedder("toy-v2:dim=8", 3, 2)).ok());
  auto done = OpenToy(dir.path(), ToyEmbedder("toy-v2:dim=8", 3));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(ByBucket(**done), ByBucket(*ref2));
  done->reset();  // settled under v2: kRefuse now refuses v1 as a plain change
  absl::Status plain = OpenToy(dir.path(), v1, RetrieverOptions::SettingChange::kRefuse).status();
  EXPECT_EQ(plain.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(plain.message()).find("unfinished"), std::string::npos) << plain;
}

// kRebuild with a new index factory and a new embedder whose first batch
// fails: nothing was written, so the old settings still open the directory
// and answer as before.
TEST(Retriever, ReembedFailingBeforeItsFirstWriteKeepsTheOldSettings) {
  TempDir dir;
  auto v1 = ToyEmbedder("toy-v1:dim=8", 1);
  std::vector<std::vector<std::pair<int64_t, float>>> before;
  {
    auto r = OpenToy(dir.path(), v1).value();
    ASSERT_TRUE(r->Ingest(SmallCorpus()).ok());
    before = ByBucket(*r);
  }
  RetrieverOptions o = Options(dir.path());
  o.embedder = ToyEmbedder("other:dim=8", 3, /*fail_call=*/1);
  o.index.dim = kToyDim;
  o.index.factory = "HNSW32";
  o.on_setting_change = RetrieverOptions::SettingChange::kRebuild;
  EXPECT_EQ(Retriever::Create(o).status().code(), absl::StatusCode::kUnavailable);
  auto again = OpenToy(dir.path(), v1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->index().options().factory, "Flat");
  EXPECT_EQ(ByBucket(**again), before);
}

}  // namespace
}  // namespace ragkv::retrieval
