// plan.h: `ragkv plan` -- the roofline planner (blend/planner.h) behind a
// command: model shape from a preset or a checkpoint, hardware from a preset
// (every ceiling overridable) or measured on this CPU (--calibrate-cpu,
// blend/calibration.h).
#ifndef RAGKV_CLI_PLAN_H_
#define RAGKV_CLI_PLAN_H_

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "blend/planner.h"

namespace ragkv::cli {

struct PlanCommandOptions {
  std::string model = "llama-3-8b";
  std::string hardware = "h100-sxm";
  bool calibrate_cpu = false;  // hardware := measured "cpu" (overrides still apply)
  double cpu_efficiency = 1.0; // multiplies the measured sgemm peak
  // Overrides (<= 0: keep the preset's): TFLOP/s and GB/s (1e9 bytes/s).
  double peak_tflops = 0, hbm_gbs = 0, host_gbs = 0, nvme_gbs = 0, net_gbs = 0;
  double layer_overhead_us = -1;  // < 0: keep
  double mem_gb = 0;        // > 0: device memory capacity (GB) for the fit checks
  double weight_bytes = 0;  // > 0: bytes per weight of every weight (e.g. 0.5625 for Q4_K)
  // Kernel-rate overrides (blend::HardwareSpec; <= 0 / empty: keep), e.g. to
  // replay the rates a `ragkv bench ttft` run logged: GEMM GFLOP/s by rows
  // as "rows:gflops,rows:gflops,..." and GFLOP/s / GB/s figures.
  std::string gemm_gflops_by_rows;
  double attention_gflops = 0, row_op_gbs = 0, rerotate_gbs = 0, alloc_gbs = 0;
  blend::PlanWorkload workload;
  std::string parallel = "none";  // --parallel none|tp|ep (workload.devices: --devices)
  std::string kv_tier;            // --kv-tier ram|ssd|redis for the capacity plan ("": controller's)
  std::string roofline;  // --roofline F.png: the operators on the device's roof
  // --validate FILE: only the validation against published figures
  // (blend/plan_validate.h); returns an empty plan.
  std::string validate;
  bool json = false;
};

// RunPlanCommand: prints the plan (Markdown or JSON) to `out`; returns the
// plan. Errors: unknown preset / unreadable checkpoint (InvalidArgument /
// NotFound with the list of presets), CPU measurement failures.
absl::StatusOr<blend::Plan> RunPlanCommand(const PlanCommandOptions& options, std::ostream& out);

}  // namespace ragkv::cli

#endif  // RAGKV_CLI_PLAN_H_
