// The per-model quality gate through the real binaries (docs/quality_gate.md):
// `ragkv calibrate` on the xchunk instrument stores a record that `ragkv
// serve` reads at start; a strict target switches blending off (CacheBlend
// requests served as full prefill, the reason in the Blend summary and in
// /metrics), a lax one keeps the cheapest ratio; both survive a restart; a
// damaged record means blending off, an absent one the documented default;
// bad calibration input stores nothing.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "blend/quality_gate.h"
#include "blend/xchunk_task.h"
#include "connector/client.h"
#include "gtest/gtest.h"
#include "model/loader.h"
#include "tests/integration/client_util.h"
#include "tests/integration/probe_util.h"
#include "tests/integration/serve_process.h"
#include "tests/support/require.h"
#include "tests/support/source_dir.h"

namespace ragkv::testing {
namespace {

// SummarySink: keeps the Blend summary.
class SummarySink : public KVSink {
 public:
  absl::Status OnHeader(const FusedPromptInfo&) override { return absl::OkStatus(); }
  absl::Status OnLayer(const FusedLayerView&) override { return absl::OkStatus(); }
  absl::Status OnSummary(const BlendStats& s) override {
    stats = s;
    return absl::OkStatus();
  }
  BlendStats stats;
};

class QualityGateTest : public ::testing::Test {
 protected:
  std::string Calibrate(const std::string& extra, int* rc) {
    const std::string log = dir_.path() + "/calibrate.log";
    std::filesystem::remove(log);
    std::vector<std::string> args = {"calibrate", "--model", blend::XchunkModelPath(),
                                     "--data-dir", data_, "--prompts", "12"};
    for (absl::string_view a : absl::StrSplit(extra, ' ', absl::SkipEmpty())) args.emplace_back(a);
    *rc = RunRagkv(args, log);
    return ReadText(log);
  }
  // Serve, one CacheBlend request (ratio left to the server), its summary.
  // With `query_out`, also `ragkv query` against the server (its output).
  BlendStats ServeAndBlend(std::string* metrics, std::string* query_out = nullptr) {
    auto serve = ServeProcess::Start(
        {"--model", blend::XchunkModelPath(), "--data-dir", data_}, dir_.path() + "/serve.log",
        /*with_metrics=*/true);
    EXPECT_TRUE(serve.ok()) << serve.status() << ReadText(dir_.path() + "/serve.log");
    if (!serve.ok()) return {};
    auto client = Client::Create({.target = (*serve)->address()});
    EXPECT_TRUE(client.ok());
    // One catalogue chunk (the instrument's vocabulary spells text in byte
    // tokens), then a raw-token query: a blend with a chunk in it.
    std::vector<v1::Document> docs(1);
    docs[0].set_doc_id("d");
    docs[0].set_text("k05 v03 k17 v11 k02 v07 k40 v01 k33 v09 k12 v04");
    auto ing = (*client)->IngestDocuments(docs);
    EXPECT_TRUE(ing.ok()) << ing.status();
    if (!ing.ok()) return {};
    v1::BlendRequest req;
    req.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
    req.add_segments()->set_chunk_id(ing->ingested(0).chunk_ids(0));
    auto* q = req.add_segments()->mutable_tokens()->mutable_ids();
    for (int32_t t : {blend::kXchunkQuery, blend::kXchunkKey0 + 5}) q->Add(t);
    SummarySink sink;
    const absl::Status s = (*client)->Blend(req, &sink);
    EXPECT_TRUE(s.ok()) << s;
    *metrics = (*serve)->Metrics();
    if (query_out != nullptr) {
      const std::string log = dir_.path() + "/query.log";
      std::filesystem::remove(log);
      EXPECT_EQ(RunRagkv({"query", "--server", (*serve)->address(), "--question", "k05",
                          "--k", "1", "--max-new-tokens", "2"}, log), 0) << ReadText(log);
      *query_out = ReadText(log);
    }
    return sink.stats;
  }
  std::string Fingerprint() {
    auto m = model::LoadModel(blend::XchunkModelPath(), {});
    EXPECT_TRUE(m.ok());
    return (*m)->fingerprint_hex();
  }
  TempDir dir_;
  std::string data_ = dir_.path() + "/data";
};

TEST_F(QualityGateTest, AStrictTargetSwitchesBlendingOffAcrossRestarts) {
  int rc = 0;
  const std::string out = Calibrate("--task xchunk --target-kl 1e-6 --target-top1 1.0", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "blending OFF")) << out;
  EXPECT_TRUE(absl::StrContains(out, "test (xchunk seeds: dev 101, test 102): blending off")) << out;
  for (int restart = 0; restart < 2; ++restart) {
    std::string metrics, query;
    const BlendStats s = ServeAndBlend(&metrics, restart == 0 ? &query : nullptr);
    EXPECT_TRUE(absl::StrContains(s.quality_gate, "blending off for this model")) << s.quality_gate;
    if (restart == 0) {
      EXPECT_TRUE(absl::StrContains(query, "gate:    quality gate: blending off")) << query;
    }
    EXPECT_EQ(s.ratio, 0.0f);  // served as full prefill
    EXPECT_TRUE(absl::StrContains(metrics, "ragkv_blend_gate_blending{source=\"calibrated\"} 0"))
        << metrics;
    // The Blend above (/metrics is read before `ragkv query` runs).
    EXPECT_TRUE(absl::StrContains(metrics, "ragkv_blend_gated_total 1")) << metrics;
  }
}

TEST_F(QualityGateTest, ALaxTargetKeepsTheCheapestRatio) {
  int rc = 0;
  const std::string out = Calibrate("--task xchunk --target-kl 10 --target-top1 0", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "chosen: CacheBlend r=0.05")) << out;
  // Chosen on the dev seed's canaries, reported on the test seed's.
  EXPECT_TRUE(absl::StrContains(out, "test (12 prompts; chosen on dev; xchunk seeds: dev 101, "
                                     "test 102): selector=lookahead-deviation r=0.05 "))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "meets the targets")) << out;
  std::string metrics;
  const BlendStats s = ServeAndBlend(&metrics);
  EXPECT_TRUE(absl::StrContains(s.quality_gate, "calibrated: r=0.05")) << s.quality_gate;
  EXPECT_FLOAT_EQ(s.ratio, 0.05f);
  EXPECT_TRUE(absl::StrContains(metrics, "ragkv_blend_gate_blending{source=\"calibrated\"} 1"))
      << metrics;
}

TEST_F(QualityGateTest, NoRecordIsTheDefaultAndADamagedOneIsBlendingOff) {
  std::string metrics;
  BlendStats s = ServeAndBlend(&metrics);
  EXPECT_TRUE(absl::StrContains(s.quality_gate, "uncalibrated model: default CacheBlend r=0.15"))
      << s.quality_gate;
  EXPECT_FLOAT_EQ(s.ratio, 0.15f);
  int rc = 0;
  ASSERT_EQ((Calibrate("--task xchunk", &rc), rc), 0);
  const std::string path = blend::GateRecordPath(data_, Fingerprint());
  std::string text = ReadText(path);
  ASSERT_FALSE(text.empty()) << path;
  text[text.find("\"ratio\": ") + 9] = '9';  // a changed digit: the checksum no longer holds
  std::ofstream(path, std::ios::trunc) << text;
  s = ServeAndBlend(&metrics);
  EXPECT_TRUE(absl::StrContains(s.quality_gate, "calibration unreadable")) << s.quality_gate;
  EXPECT_TRUE(absl::StrContains(s.quality_gate, "checksum")) << s.quality_gate;
  EXPECT_EQ(s.ratio, 0.0f);
  EXPECT_TRUE(absl::StrContains(metrics, "ragkv_blend_gate_blending{source=\"unreadable\"} 0"));
}

// A MuSiQue-style .json corpus is split by question id: the setting is
// chosen on dev questions and reported on test ones.
TEST_F(QualityGateTest, AMusiqueCorpusChoosesOnDevAndReportsOnTest) {
  const char* env = std::getenv("RAGKV_TEST_CORPUS");
  const std::string corpus =
      (env ? std::string(env) : RAGKV_SOURCE_DIR + "/../shared/corpus") + "/musique_dev.json";
  RAGKV_REQUIRE_OR_SKIP(std::filesystem::exists(corpus)) << "no corpus at " << corpus;
  int rc = 0;
  const std::string out = Calibrate("--corpus " + corpus + " --ratios 0.5 --target-kl 10 "
                                    "--target-top1 0",
                                    &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "12 dev prompts")) << out;
  EXPECT_TRUE(absl::StrContains(out, "test (12 prompts; chosen on dev; MuSiQue questions: dev / "
                                     "test by question id"))
      << out;
}

TEST_F(QualityGateTest, BadCalibrationInputStoresNothing) {
  const std::string tiny = dir_.path() + "/tiny.txt";
  std::ofstream(tiny) << "too short";
  int rc = 0;
  std::string out = Calibrate("--corpus " + tiny, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "too small")) << out;
  EXPECT_TRUE(absl::StrContains(out, "nothing stored")) << out;
  out = Calibrate("--corpus " + dir_.path() + "/absent", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "no such file")) << out;
  out = Calibrate("", &rc);  // neither --corpus nor --task
  EXPECT_EQ(rc, 2) << out;
  EXPECT_FALSE(std::filesystem::exists(data_ + "/calibration"));
}

}  // namespace
}  // namespace ragkv::testing
