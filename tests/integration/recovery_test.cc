// recovery_test.cc: damaged databases after a crash, against the real
// `ragkv serve` (issue 16 item 4). The catalogue is the source of truth: a
// damaged WAL or MANIFEST makes startup fail loudly, naming `ragkv repair`,
// which salvages it (never a healthy start with documents silently gone).
// The KV store is a cache: a damaged one is quarantined at startup (moved
// aside, counted in ragkv_tier_quarantined_total, logged) and the sidecar
// serves from an empty one, never a wrong tensor.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/loader.h"
#include "tests/integration/probe_util.h"
#include "tests/integration/serve_process.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "no test model at " << TestModelPath();
    data_ = dir_.path() + "/data";
    log_ = dir_.path() + "/serve.log";
  }
  std::vector<std::string> Args() const {
    return {"--data-dir", data_, "--model", TestModelPath(), "--services", "retrieval,kvstore"};
  }
  // Ingests docs 0..n-1 one call each, then kill -9 (the WAL holds them).
  void IngestAndKill(int n) {
    auto s = ServeProcess::Start(Args(), log_);
    ASSERT_TRUE(s.ok()) << s.status();
    auto client = (*s)->NewClient();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(client->IngestDocuments({TextDoc(absl::StrCat("doc-", i), 3000)}).ok());
    }
    (*s)->Kill9();
  }
  int Present(int n) {
    auto s = ServeProcess::Start(Args(), log_);
    EXPECT_TRUE(s.ok()) << s.status() << "\n" << ReadText(log_);
    if (!s.ok()) return -1;
    auto client = (*s)->NewClient();
    int present = 0;
    for (int i = 0; i < n; ++i) {
      v1::GetChunksRequest r;
      present += client->DeleteDocument(absl::StrCat("doc-", i)).ok() ? 1 : 0;
    }
    return present;
  }

  TempDir dir_;
  std::string data_, log_;
};

TEST_F(RecoveryTest, DamagedCatalogueFileFailsStartupLoudlyAndRepairSalvages) {
  constexpr int kDocs = 12;
  IngestAndKill(kDocs);
  // Every document change is flushed to SST files (the WAL holds only what
  // came after): damage the first data block of every SST.
  // (A flush the kill cut short can leave an empty or short SST that the
  // MANIFEST never named: nothing to damage there.)
  int flipped = 0;
  for (const std::string& f : FilesWithExtension(data_ + "/retrieval/catalogue", ".sst")) {
    if (std::filesystem::file_size(f) < 64) continue;
    ASSERT_TRUE(FlipBytes(f, 16, 8)) << f;
    ++flipped;
  }
  ASSERT_GE(flipped, 2);

  auto refused = ServeProcess::Start(Args(), log_);
  ASSERT_FALSE(refused.ok()) << "a damaged catalogue must not start healthy";
  const std::string text = ReadText(log_);
  EXPECT_TRUE(absl::StrContains(text, "catalogue is damaged")) << text;
  EXPECT_TRUE(absl::StrContains(text, "ragkv repair")) << text;

  const std::string repair_log = dir_.path() + "/repair.log";
  EXPECT_EQ(RunRagkv({"repair", "--data-dir", data_}, repair_log), 0) << ReadText(repair_log);
  EXPECT_TRUE(absl::StrContains(ReadText(repair_log), "catalogue: repaired")) << ReadText(repair_log);
  // What RepairDB salvages from damaged blocks varies; the sidecar must
  // start on the result and serve only what survived.
  const int present = Present(kDocs);
  EXPECT_GE(present, 0) << ReadText(repair_log);
  EXPECT_LE(present, kDocs);
}

TEST_F(RecoveryTest, DamagedCatalogueManifestIsRepairedWithEveryDocument) {
  constexpr int kDocs = 6;
  IngestAndKill(kDocs);
  const std::vector<std::string> all = FilesWithExtension(data_ + "/retrieval/catalogue", "");
  std::string manifest;
  for (const std::string& f : all) {
    if (absl::StrContains(f, "/MANIFEST-")) manifest = f;
  }
  ASSERT_FALSE(manifest.empty());
  ASSERT_TRUE(FlipBytes(manifest, std::filesystem::file_size(manifest) / 2, 4));
  EXPECT_FALSE(ServeProcess::Start(Args(), log_).ok());
  EXPECT_TRUE(absl::StrContains(ReadText(log_), "ragkv repair")) << ReadText(log_);
  const std::string repair_log = dir_.path() + "/repair.log";
  EXPECT_EQ(RunRagkv({"repair", "--data-dir", data_}, repair_log), 0) << ReadText(repair_log);
  EXPECT_EQ(Present(kDocs), kDocs) << "the WAL held every document; RepairDB replays it\n"
                                    << ReadText(repair_log);
}

TEST_F(RecoveryTest, DamagedKvStoreIsQuarantinedAndNeverServed) {
  auto m = model::LoadModel(TestModelPath());
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<StoredChunk> chunks;
  {
    auto s = ServeProcess::Start(Args(), log_);
    ASSERT_TRUE(s.ok()) << s.status();
    auto client = (*s)->NewClient();
    for (int i = 0; i < 12; ++i) {
      std::vector<int32_t> toks(48);
      for (int t = 0; t < 48; ++t) toks[t] = (i * 48 + t) % 500 + 1;
      chunks.push_back(ServedChunk(**m, toks, i));
      ASSERT_TRUE(client->PutChunk(chunks.back()).ok());
    }
    (*s)->Kill9();
  }
  const std::vector<std::string> wals = FilesWithExtension(data_ + "/kv", ".log");
  ASSERT_FALSE(wals.empty());
  const uint64_t size = std::filesystem::file_size(wals.back());
  ASSERT_TRUE(FlipBytes(wals.back(), size / 3, 8));

  auto s = ServeProcess::Start(Args(), log_, /*with_metrics=*/true);
  ASSERT_TRUE(s.ok()) << s.status() << "\n" << ReadText(log_);
  EXPECT_EQ(MetricValue((*s)->Metrics(), "ragkv_tier_quarantined_total", "tier=\"ssd\""), 1.0);
  EXPECT_TRUE(absl::StrContains(ReadText(log_), "quarantined to")) << ReadText(log_);
  bool aside = false;
  for (const auto& e : std::filesystem::directory_iterator(data_)) {
    aside |= absl::StrContains(e.path().filename().string(), "kv.corrupt-");
  }
  EXPECT_TRUE(aside);
  auto client = (*s)->NewClient();
  for (const StoredChunk& c : chunks) {
    auto got = client->GetChunk(c.header.key());
    EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  }
  EXPECT_TRUE(client->PutChunk(chunks[0]).ok()) << "the fresh store takes writes";
}

}  // namespace
}  // namespace ragkv::testing
