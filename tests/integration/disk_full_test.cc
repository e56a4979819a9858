// disk_full_test.cc: the real `ragkv serve` with its data dir on a small
// tmpfs (a private mount namespace: needs CAP_SYS_ADMIN, else skipped). A
// full disk is RESOURCE_EXHAUSTED on ingest and on PutChunk, never a crash
// (RocksDB used to assert in the background ~3 s after the catalogue's
// ENOSPC), the SSD tier reports itself down while it cannot write, and both
// the catalogue and the KV tier recover by themselves once space returns,
// with every acknowledged document still there after a restart.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "model/loader.h"
#include "tests/integration/probe_util.h"
#include "tests/integration/serve_process.h"
#include "tests/integration/sidecar_fixture.h"
#include "tests/support/require.h"

namespace ragkv::testing {
namespace {

constexpr uint64_t kTmpfsBytes = 24 << 20;

class DiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAGKV_REQUIRE_OR_SKIP(HaveTestModel()) << "no test model at " << TestModelPath();
    mnt_ = dir_.path() + "/mnt";
    const std::string why = PrivateTmpfs(mnt_, kTmpfsBytes);
    if (!why.empty()) GTEST_SKIP() << "no private tmpfs (" << why << ")";
    auto m = model::LoadModel(TestModelPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }
  void TearDown() override {
    server_.reset();
    if (!mnt_.empty()) ::umount2(mnt_.c_str(), MNT_DETACH);
  }

  std::vector<std::string> Args() const {
    return {"--data-dir", mnt_ + "/data", "--model", TestModelPath(), "--services",
            "retrieval,kvstore,blend", "--ssd-budget", "64M"};
  }

  TempDir dir_;
  std::string mnt_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<ServeProcess> server_;
};

TEST_F(DiskFullTest, FullDiskIsResourceExhaustedAndRecoversWhenSpaceReturns) {
  const std::string log = dir_.path() + "/serve.log";
  auto started = ServeProcess::Start(Args(), log, /*with_metrics=*/true);
  ASSERT_TRUE(started.ok()) << started.status();
  server_ = std::move(*started);
  auto client = server_->NewClient(absl::Seconds(30));
  ASSERT_NE(client, nullptr);
  FillDisk(mnt_ + "/filler", 256 << 10);

  // Ingest until the catalogue cannot write.
  std::vector<std::string> acked;
  absl::Status ingest_error;
  for (int i = 0; i < 400 && ingest_error.ok(); ++i) {
    const std::string id = absl::StrCat("doc-", i);
    auto r = client->IngestDocuments({TextDoc(id, 16 << 10)});
    if (r.ok()) acked.push_back(id); else ingest_error = r.status();
  }
  ASSERT_FALSE(ingest_error.ok()) << "the disk never filled";
  EXPECT_TRUE(absl::IsResourceExhausted(ingest_error)) << ingest_error;
  absl::SleepFor(absl::Seconds(5));  // RocksDB used to assert here, with no request
  ASSERT_TRUE(client->HealthCheck("", absl::Seconds(5)).ok()) << ReadText(log);

  // The KV tier: PutChunk until it cannot write.
  absl::Status put_error;
  for (int i = 0; i < 400 && put_error.ok(); ++i) {
    std::vector<int32_t> toks(64);
    for (int t = 0; t < 64; ++t) toks[t] = (i * 64 + t) % 500 + 1;
    put_error = client->PutChunk(ServedChunk(*model_, toks, i)).status();
  }
  ASSERT_FALSE(put_error.ok()) << "the KV tier never filled";
  EXPECT_TRUE(absl::IsResourceExhausted(put_error)) << put_error;
  EXPECT_EQ(MetricValue(server_->Metrics(), "ragkv_tier_up", "tier=\"ssd\""), 0.0)
      << "the SSD tier cannot write but says it is up";

  // No crash in the background (RocksDB's assertion came ~3 s later).
  absl::SleepFor(absl::Seconds(5));
  ASSERT_TRUE(client->HealthCheck("", absl::Seconds(5)).ok()) << ReadText(log);

  // Space returns: both recover without a restart.
  std::filesystem::remove(mnt_ + "/filler");
  absl::Status again = absl::UnknownError("not tried");
  for (int i = 0; i < 50 && !again.ok(); ++i) {
    again = client->IngestDocuments({TextDoc("after-" + std::to_string(i), 4 << 10)}).status();
    if (!again.ok()) absl::SleepFor(absl::Milliseconds(200));
    else acked.push_back("after-" + std::to_string(i));
  }
  EXPECT_TRUE(again.ok()) << "catalogue did not recover: " << again;
  std::vector<int32_t> toks(16, 7);
  absl::Status put_again = absl::UnknownError("not tried");
  for (int i = 0; i < 50 && !put_again.ok(); ++i) {
    toks[0] = 1000 + i;
    put_again = client->PutChunk(ServedChunk(*model_, toks, 99)).status();
    if (!put_again.ok()) absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_TRUE(put_again.ok()) << "KV tier did not recover: " << put_again;
  EXPECT_EQ(MetricValue(server_->Metrics(), "ragkv_tier_up", "tier=\"ssd\""), 1.0);

  // Every acknowledged document survives a restart.
  EXPECT_EQ(server_->Terminate(), 0) << ReadText(log);
  started = ServeProcess::Start(Args(), log);
  ASSERT_TRUE(started.ok()) << started.status() << "\n" << ReadText(log);
  server_ = std::move(*started);
  client = server_->NewClient(absl::Seconds(30));
  for (const std::string& id : acked) {
    v1::SearchRequest q;
    auto d = client->DeleteDocument(id);  // NOT_FOUND if it was lost
    EXPECT_TRUE(d.ok()) << "acknowledged document " << id << " lost: " << d.status();
  }
}

}  // namespace
}  // namespace ragkv::testing
