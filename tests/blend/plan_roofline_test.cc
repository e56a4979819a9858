// The roofline plot: every operator point lies on the pure roofline
// min(peak, intensity x bandwidth) (no efficiency factor), byte-only
// operators are left out, and the PNG is written when gnuplot is present.
#include "blend/plan_roofline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace ragkv::blend {
namespace {

Plan QwenOnH100() {
  absl::StatusOr<ModelArch> a = ArchPreset("qwen3-30b-a3b");
  absl::StatusOr<HardwareSpec> hw = HardwarePreset("h100-sxm");
  EXPECT_TRUE(a.ok() && hw.ok());
  return MakeArchPlan(*a, *hw, PlanWorkload{});
}

TEST(PlanRoofline, PointsLieOnTheRoof) {
  const Plan plan = QwenOnH100();
  const std::vector<RooflinePoint> pts = RooflinePoints(plan);
  ASSERT_GT(pts.size(), 10u);
  const double peak = plan.hardware.peak_flops, bw = plan.hardware.mem_bw;
  for (const RooflinePoint& p : pts) {
    EXPECT_NEAR(p.flops_per_s, std::min(peak, p.intensity * bw), 1e-9 * peak) << p.op;
    EXPECT_EQ(p.op.rfind("kv_load", 0), std::string::npos);
  }
  // Decode's expert reads sit on the bandwidth slope, prefill's on the flat roof.
  bool decode_memory = false, prefill_compute = false;
  for (const RooflinePoint& p : pts) {
    if (p.phase == "decode b=8" && p.op == "moe.experts") decode_memory = p.flops_per_s < peak / 2;
    // (Each layer's compute time is summed: equal to the peak up to rounding.)
    if (p.phase == "prefill" && p.op == "attn.score") {
      prefill_compute = std::abs(p.flops_per_s - peak) <= 1e-9 * peak;
    }
  }
  EXPECT_TRUE(decode_memory);
  EXPECT_TRUE(prefill_compute);
}

TEST(PlanRoofline, WritesAPng) {
  if (std::system("gnuplot --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no gnuplot";
  const std::string path = ::testing::TempDir() + "/roofline_test.png";
  std::remove(path.c_str());
  ASSERT_TRUE(WriteRoofline(QwenOnH100(), path).ok());
  std::ifstream f(path, std::ios::binary);
  std::string magic(8, '\0');
  f.read(magic.data(), 8);
  EXPECT_EQ(magic.substr(1, 3), "PNG");
  EXPECT_FALSE(std::ifstream(path + ".gp").good());  // the script is removed
}

}  // namespace
}  // namespace ragkv::blend
