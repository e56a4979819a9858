// plan_roofline.h: the roofline plot of a plan (`ragkv plan --roofline F.png`).
//
// Every operator of the plan's phases with FLOPs is a point at (arithmetic
// intensity, attained FLOP/s = FLOPs / its time) under the device's roof
// min(peak, intensity x memory bandwidth) (the FP8 roof too when the device
// has one); operators that only move bytes (KV loads, collectives) have no
// intensity and are listed under the plot instead. Drawn by gnuplot
// (pngcairo, else png), as the project's other plots (bench/).
#ifndef RAGKV_BLEND_PLAN_ROOFLINE_H_
#define RAGKV_BLEND_PLAN_ROOFLINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "blend/planner.h"

namespace ragkv::blend {

struct RooflinePoint {
  std::string phase;
  std::string op;
  double intensity = 0;    // FLOP / byte
  double flops_per_s = 0;  // attained: FLOPs / operator time
};

// RooflinePoints: one point per operator with FLOPs > 0 and time > 0, in the
// phases' order.
std::vector<RooflinePoint> RooflinePoints(const Plan& plan);

// WriteRoofline: `png_path` (and nothing else: the gnuplot script and data
// are removed). Internal error when gnuplot fails or is missing.
absl::Status WriteRoofline(const Plan& plan, const std::string& png_path);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLAN_ROOFLINE_H_
