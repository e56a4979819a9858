// blend/quality_gate.h: calibration picks the cheapest candidate that meets
// the targets (or none), the record round-trips and is refused when damaged,
// for another model or version; DecideGate's three outcomes.
#include "blend/quality_gate.h"

#include <unistd.h>

#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "blend_test_util.h"

namespace ragkv::blend {
namespace {

using testing::RandomTokens;

std::vector<CanaryPrompt> Canaries(const model::Model& m, int n) {
  std::mt19937 rng(3);
  std::vector<CanaryPrompt> out(n);
  for (CanaryPrompt& p : out) {
    p.prefix = {1};
    for (int c = 0; c < 3; ++c) p.chunks.push_back(RandomTokens(&rng, 16, m.config().vocab_size));
    p.query = RandomTokens(&rng, 4, m.config().vocab_size);
  }
  return out;
}

using QualityGateTest = testing::ModelBlenderTest;

TEST_F(QualityGateTest, TheCheapestCandidateThatMeetsTheTargetsIsChosen) {
  CalibrateOptions o;
  o.ratios = {0.3, 1.0, 0.1};  // tried ascending
  o.targets = {1e9, 0.0};      // everything meets
  auto r = Calibrate(*blender_, Canaries(*model_, 3), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->candidates.size(), 12u);  // 3 ratios x 4 selectors
  EXPECT_DOUBLE_EQ(r->candidates[0].ratio, 0.1);
  EXPECT_TRUE(r->blending);
  EXPECT_DOUBLE_EQ(r->ratio, 0.1);
  EXPECT_EQ(r->selector, Selector::kLookaheadDeviation);
  EXPECT_EQ(r->fingerprint, model_->fingerprint_hex());
  // r = 1 is full prefill: KL ~0, top-1 1; a target only it meets picks it.
  const GateCandidate& full = r->candidates[8];
  EXPECT_DOUBLE_EQ(full.ratio, 1.0);
  EXPECT_LT(full.kl, 1e-6);
  EXPECT_DOUBLE_EQ(full.top1, 1.0);
  o.targets = {1e-6, 1.0};
  r = Calibrate(*blender_, Canaries(*model_, 3), o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->blending);
  EXPECT_DOUBLE_EQ(r->ratio, 1.0);
  o.ratios = {0.1};  // nothing meets a strict target: blending off
  r = Calibrate(*blender_, Canaries(*model_, 3), o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->blending);
  EXPECT_FALSE(DecideGate(*r).blending);
  EXPECT_EQ(Calibrate(*blender_, {}, o).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(QualityGateTest, RecordsRoundTripAndDamageIsRefused) {
  GateRecord r;
  r.fingerprint = "abc";
  r.prompts = 7;
  r.blending = true;
  r.ratio = 0.2;
  r.selector = Selector::kDeviation;
  r.candidates = {{Selector::kDeviation, 0.2, 0.001, 0.99, true}};
  const std::string text = EncodeGateRecord(r);
  auto back = DecodeGateRecord(text, "abc");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->prompts, 7);
  EXPECT_DOUBLE_EQ(back->ratio, 0.2);
  EXPECT_EQ(back->selector, Selector::kDeviation);
  ASSERT_EQ(back->candidates.size(), 1u);
  EXPECT_DOUBLE_EQ(back->candidates[0].top1, 0.99);
  EXPECT_EQ(DecodeGateRecord(text, "xyz").status().code(), absl::StatusCode::kFailedPrecondition);
  std::string bad = text;
  bad[bad.find("0.2")] = '1';  // "1.2": the checksum no longer matches
  EXPECT_EQ(DecodeGateRecord(bad, "abc").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeGateRecord("{not json", "abc").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeGateRecord("", "abc").status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(QualityGateTest, DecideGateDefaultsRecordsAndRefusals) {
  GateDecision d = DecideGate(absl::NotFoundError("none"));
  EXPECT_EQ(d.source, GateDecision::Source::kUncalibrated);
  EXPECT_TRUE(d.blending);
  EXPECT_DOUBLE_EQ(d.ratio, kUncalibratedRatio);
  EXPECT_NE(d.reason.find("uncalibrated"), std::string::npos);
  d = DecideGate(absl::DataLossError("checksum mismatch"));
  EXPECT_EQ(d.source, GateDecision::Source::kUnreadable);
  EXPECT_FALSE(d.blending);
  EXPECT_NE(d.reason.find("checksum mismatch"), std::string::npos);
  GateRecord r;
  r.blending = true;
  r.ratio = 0.1;
  d = DecideGate(r);
  EXPECT_EQ(d.source, GateDecision::Source::kCalibrated);
  EXPECT_DOUBLE_EQ(d.ratio, 0.1);
  EXPECT_NE(d.reason.find("calibrated: r=0.10"), std::string::npos) << d.reason;
}

TEST_F(QualityGateTest, WriteAndReadThroughTheDataDir) {
  const std::string dir = ::testing::TempDir() + "/gate_" + std::to_string(::getpid());
  GateRecord r;
  r.fingerprint = model_->fingerprint_hex();
  r.blending = false;
  ASSERT_TRUE(WriteGateRecord(dir, r).ok());
  auto back = ReadGateRecord(dir, r.fingerprint);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->blending);
  EXPECT_TRUE(absl::IsNotFound(ReadGateRecord(dir, "other").status()));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ragkv::blend
