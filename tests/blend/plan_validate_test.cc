// Validation against published figures: the repository's figure file parses
// (>= 10 figures, each with a URL, both halves), a prediction equals the
// per-operator phases computed by hand from the presets, the factors are
// fitted on the "fit" half only, the report is deterministic, and malformed
// rows are refused by line.
#include "blend/plan_validate.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "blend/plan_ops.h"
#include "blend/plan_parallel.h"
#include "tests/support/source_dir.h"

namespace ragkv::blend {
namespace {

std::vector<PublishedFigure> Figures() {
  absl::StatusOr<std::vector<PublishedFigure>> f =
      ReadPublishedFigures(RAGKV_SOURCE_DIR + "/bench/planner/published.tsv");
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *f : std::vector<PublishedFigure>{};
}

TEST(PlanValidate, TheFigureFileIsComplete) {
  const std::vector<PublishedFigure> figs = Figures();
  ASSERT_GE(figs.size(), 10u);
  std::set<std::string> halves, ids;
  for (const PublishedFigure& f : figs) {
    EXPECT_EQ(f.source.rfind("http", 0), 0u) << f.id;
    EXPECT_FALSE(f.setting.empty()) << f.id;
    EXPECT_TRUE(ids.insert(f.id).second) << f.id;
    halves.insert(f.half);
  }
  EXPECT_EQ(halves, (std::set<std::string>{"fit", "test"}));
}

// A TTFT row under the raw roofline is the prefill phase of the sharded
// preset; an e2e row adds (output - 1) decode steps at the mean context.
TEST(PlanValidate, PredictionIsThePhasesByHand) {
  PublishedFigure f;
  f.model = "llama-2-70b";
  f.hardware = "h100-sxm";
  f.devices = 4;
  f.parallel = "tp";
  f.precision = "fp8kv";
  f.metric = "ttft";
  f.input = 2048;
  absl::StatusOr<ModelArch> a = ArchPreset("llama-2-70b");
  ASSERT_TRUE(a.ok());
  a->weight_bytes = a->expert_weight_bytes = a->kv_bytes = 1;
  a->precision = Precision::kFp8;
  absl::StatusOr<ModelArch> s = ShardArch(*a, 4, ParallelKind::kTensor);
  absl::StatusOr<HardwareSpec> hw = HardwarePreset("h100-sxm");
  ASSERT_TRUE(s.ok() && hw.ok());
  absl::StatusOr<double> ttft = PredictMs(f, Efficiency{});
  ASSERT_TRUE(ttft.ok()) << ttft.status();
  EXPECT_DOUBLE_EQ(*ttft, PrefillPhase(*s, *hw, 2048).time_s * 1e3);
  f.metric = "e2e";
  f.batch = 8;
  f.output = 128;
  absl::StatusOr<double> e2e = PredictMs(f, Efficiency{});
  ASSERT_TRUE(e2e.ok());
  EXPECT_NEAR(*e2e, (PrefillPhase(*s, *hw, 2048, 8).time_s +
                     127 * DecodePhase(*s, *hw, 8, 2048 + 64).time_s) * 1e3, 1e-9);
  // Halving the bandwidth slows a memory-bound decode step by about 2x.
  f.metric = "tpot";
  Efficiency half;
  half.memory = 0.5;
  const double slow = *PredictMs(f, half), fast = *PredictMs(f, Efficiency{});
  EXPECT_GT(slow / fast, 1.5);
}

TEST(PlanValidate, FitsOnTheFitHalfOnlyAndIsDeterministic) {
  std::vector<PublishedFigure> figs = Figures();
  ASSERT_FALSE(figs.empty());
  absl::StatusOr<ValidationReport> a = Validate(figs);
  ASSERT_TRUE(a.ok()) << a.status();
  // Issue 42's target on the held-out half (docs/planner.md reports 13.8%):
  // a change to the operators or presets that loses it fails here.
  EXPECT_LE(a->median_abs_error_test, 0.20);
  for (PublishedFigure& f : figs) {
    if (f.half == "test") f.measured_ms *= 3;  // the held-out half cannot move the fit
  }
  absl::StatusOr<ValidationReport> b = Validate(figs);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->fitted.compute_16, b->fitted.compute_16);
  EXPECT_EQ(a->fitted.compute_fp8, b->fitted.compute_fp8);
  EXPECT_EQ(a->fitted.memory, b->fitted.memory);
  EXPECT_EQ(a->fitted.layer_overhead_s, b->fitted.layer_overhead_s);
  EXPECT_EQ(a->median_abs_error_fit, b->median_abs_error_fit);
  EXPECT_NE(a->median_abs_error_test, b->median_abs_error_test);
  std::ostringstream x, y;
  PrintValidation(*a, x);
  PrintValidation(*Validate(Figures()), y);
  EXPECT_EQ(x.str(), y.str());
  EXPECT_NE(x.str().find("median |error|"), std::string::npos);
}

TEST(PlanValidate, MalformedRowsAreRefusedByLine) {
  const std::string path = ::testing::TempDir() + "/bad_figures.tsv";
  {
    std::ofstream f(path);
    f << "# comment\nid\thalf\tmodel\thardware\tdevices\tparallel\tprecision\tmetric\tbatch\t"
         "input\toutput\tmeasured_ms\tsource\tsetting\n"
      << "X1\tfit\tllama-7b\th100-sxm\t1\tnone\tbf16\tttft\t1\t128\t1\t7\thttp://x\ts\n"
      << "X2\tfit\tno-such\th100-sxm\t1\tnone\tbf16\tttft\t1\t128\t1\t7\thttp://x\ts\n";
  }
  absl::StatusOr<std::vector<PublishedFigure>> r = ReadPublishedFigures(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(":4:"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("no-such"), std::string::npos);
}

}  // namespace
}  // namespace ragkv::blend
