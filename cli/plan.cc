#include "cli/plan.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "blend/calibration.h"
#include "blend/plan_gguf.h"
#include "blend/plan_parallel.h"
#include "blend/plan_roofline.h"
#include "blend/plan_validate.h"
#include "cli/command.h"

namespace ragkv::cli {

using blend::CpuCeilings;
using blend::CpuHardwareSpec;
using blend::CpuMeasureOptions;
using blend::DescribeKernelRates;
using blend::MeasureCpu;
using blend::ResolveModelShape;

namespace {

bool IsArchPreset(const std::string& name) {
  const std::vector<std::string> names = blend::ArchPresetNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// IsArchModel: planned from its architecture (a preset or a GGUF header,
// blend/plan_gguf.h) rather than a ModelShape preset / loaded checkpoint.
bool IsArchModel(const std::string& name) {
  return IsArchPreset(name) || absl::EndsWith(name, ".gguf");
}

// ResolveArch: an architecture preset (blend/plan_arch.h) or a GGUF header
// (blend/plan_gguf.h; f32 weights and activations under --calibrate-cpu, as
// the CPU runtime) or, via
// ResolveModelShape, a ModelShape preset / checkpoint as a dense architecture.
// *shape: the shape the legacy rows use (the preset's or checkpoint's own;
// the dense equivalent of an architecture preset).
absl::StatusOr<blend::ModelArch> ResolveArch(const PlanCommandOptions& o,
                                             blend::ModelShape* shape_out) {
  if (IsArchModel(o.model)) {
    ASSIGN_OR_RETURN(blend::ModelArch a, IsArchPreset(o.model)
                                             ? blend::ArchPreset(o.model)
                                             : blend::ArchFromGgufHeader(o.model));
    if (o.calibrate_cpu) a.weight_bytes = a.expert_weight_bytes = a.act_bytes = a.kv_bytes = 4;
    *shape_out = blend::ShapeOfArch(a);
    return a;
  }
  absl::StatusOr<blend::ModelShape> shape = ResolveModelShape(o.model, o.calibrate_cpu);
  if (absl::IsInvalidArgument(shape.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape.status().message(), "; architecture presets: ",
                     absl::StrJoin(blend::ArchPresetNames(), ", ")));
  }
  if (!shape.ok()) return shape.status();
  *shape_out = *shape;
  return blend::ArchOfShape(*shape);
}

absl::StatusOr<blend::Tier> ParseCostTier(const std::string& name) {
  for (blend::Tier t : {blend::Tier::kRam, blend::Tier::kSsd, blend::Tier::kRemote}) {
    if (name == blend::TierName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("plan: --kv-tier '", name, "' (ram, ssd, redis)"));
}

}  // namespace

absl::StatusOr<blend::Plan> RunPlanCommand(const PlanCommandOptions& o, std::ostream& out) {
  if (!o.validate.empty()) {
    ASSIGN_OR_RETURN(std::vector<blend::PublishedFigure> figures,
                     blend::ReadPublishedFigures(o.validate));
    ASSIGN_OR_RETURN(blend::ValidationReport report, blend::Validate(figures));
    blend::PrintValidation(report, out);
    return blend::Plan{};
  }
  blend::HardwareSpec hw;
  blend::ModelShape shape;
  ASSIGN_OR_RETURN(blend::ModelArch arch, ResolveArch(o, &shape));
  if (o.calibrate_cpu) {
    // The kernels of one layer of this model are timed too (GEMM efficiency
    // by row count, attention, row ops, re-rotation, allocation).
    CpuMeasureOptions mo;
    mo.model = shape;
    ASSIGN_OR_RETURN(CpuCeilings c, MeasureCpu(mo));
    hw = CpuHardwareSpec(c, o.cpu_efficiency);
    if (!o.json) {
      out << "# cpu calibration: sgemm " << c.sgemm_flops / 1e9 << " GFLOP/s (n=" << c.gemm_n
          << ", x efficiency " << o.cpu_efficiency << "), memcpy " << c.copy_bytes_per_s / 1e9
          << " GB/s, cold file read " << c.file_read_bytes_per_s / 1e9 << " GB/s\n"
          << "# " << DescribeKernelRates(c) << "\n";
    }
  } else {
    absl::StatusOr<blend::HardwareSpec> p = blend::HardwarePreset(o.hardware);
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown hardware preset '", o.hardware, "' (presets: ",
                       absl::StrJoin(blend::HardwarePresetNames(), ", "), ", or --calibrate-cpu)"));
    }
    hw = *p;
  }
  if (o.peak_tflops > 0) hw.peak_flops = o.peak_tflops * 1e12;
  if (o.hbm_gbs > 0) hw.mem_bw = o.hbm_gbs * 1e9;
  if (o.host_gbs > 0) hw.ram_tier_bw = o.host_gbs * 1e9;
  if (o.nvme_gbs > 0) hw.ssd_tier_bw = o.nvme_gbs * 1e9;
  if (o.net_gbs > 0) hw.remote_tier_bw = o.net_gbs * 1e9;
  if (o.layer_overhead_us >= 0) hw.layer_overhead_s = o.layer_overhead_us * 1e-6;
  if (o.mem_gb > 0) hw.mem_capacity_bytes = o.mem_gb * 1e9;
  if (o.weight_bytes > 0) arch.weight_bytes = arch.expert_weight_bytes = o.weight_bytes;
  if (!o.gemm_gflops_by_rows.empty()) {
    hw.gemm_flops_at_rows.clear();
    for (absl::string_view item : absl::StrSplit(o.gemm_gflops_by_rows, ',')) {
      std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
      double rows = 0, gflops = 0;
      if (kv.size() != 2 || !absl::SimpleAtod(kv[0], &rows) ||
          !absl::SimpleAtod(kv[1], &gflops) || rows <= 0 || gflops <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan: --gemm-gflops-by-rows wants rows:gflops,..., got '", item, "'"));
      }
      hw.gemm_flops_at_rows.push_back({rows, gflops * 1e9});
    }
    std::sort(hw.gemm_flops_at_rows.begin(), hw.gemm_flops_at_rows.end());
  }
  if (o.attention_gflops > 0) hw.attention_flops = o.attention_gflops * 1e9;
  if (o.row_op_gbs > 0) hw.row_op_bytes_per_s = o.row_op_gbs * 1e9;
  if (o.rerotate_gbs > 0) hw.rerotate_bytes_per_s = o.rerotate_gbs * 1e9;
  if (o.alloc_gbs > 0) hw.alloc_bytes_per_s = o.alloc_gbs * 1e9;
  const blend::PlanWorkload& w = o.workload;
  if (w.chunks <= 0 || w.chunk_tokens <= 0 || w.query_tokens <= 0) {
    return absl::InvalidArgumentError("plan: --chunks, --chunk-tokens, --query-tokens must be > 0");
  }
  if (!(w.r_min >= 0 && w.r_min <= w.r_max && w.r_max <= 1)) {
    return absl::InvalidArgumentError("plan: need 0 <= r_min <= r_max <= 1");
  }
  if (w.decode_batch <= 0) return absl::InvalidArgumentError("plan: --decode-batch must be > 0");
  blend::PlanWorkload work = w;
  ASSIGN_OR_RETURN(work.parallel, blend::ParseParallel(o.parallel));
  if (work.devices > 1 && work.parallel == blend::ParallelKind::kNone) {
    return absl::InvalidArgumentError("plan: --devices > 1 needs --parallel tp or ep");
  }
  RETURN_IF_ERROR(blend::ShardArch(arch, work.devices, work.parallel).status());
  if (!o.kv_tier.empty()) {
    ASSIGN_OR_RETURN(work.kv_tier, ParseCostTier(o.kv_tier));
  }
  if (work.corpus.corpus_tokens < 0 || work.corpus.requests_per_s <= 0 ||
      work.corpus.output_tokens < 0) {
    return absl::InvalidArgumentError(
        "plan: --corpus-tokens >= 0, --request-rate > 0, --output-tokens >= 0");
  }
  blend::Plan plan;
  if (IsArchModel(o.model)) {
    plan = blend::MakeArchPlan(arch, hw, work);
  } else {
    plan = blend::MakePlan(shape, hw, work);
    blend::AddArchAnalysis(arch, &plan);
  }
  if (!o.roofline.empty()) RETURN_IF_ERROR(blend::WriteRoofline(plan, o.roofline));
  if (o.json) {
    blend::PrintPlanJson(plan, out);
  } else {
    blend::PrintPlanTable(plan, out);
  }
  return plan;
}

namespace {

class PlanCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--model", o_.model, "preset or checkpoint/synthetic spec")
        ->capture_default_str();
    cmd->add_option("--hardware", o_.hardware, "preset")->capture_default_str();
    cmd->add_flag("--calibrate-cpu", o_.calibrate_cpu,
                         "hardware := this CPU's measured sgemm/memcpy/file-read ceilings (f32)");
    cmd->add_option("--cpu-efficiency", o_.cpu_efficiency, "x measured sgemm peak")
        ->capture_default_str();
    cmd->add_option("--peak-tflops", o_.peak_tflops, "override");
    cmd->add_option("--hbm-gbs", o_.hbm_gbs, "override");
    cmd->add_option("--host-gbs", o_.host_gbs, "override (RAM tier link)");
    cmd->add_option("--nvme-gbs", o_.nvme_gbs, "override (SSD tier)");
    cmd->add_option("--net-gbs", o_.net_gbs, "override (remote tier)");
    cmd->add_option("--layer-overhead-us", o_.layer_overhead_us, "override");
    cmd->add_option("--mem-gb", o_.mem_gb, "override: device memory capacity (GB)");
    cmd->add_option("--weight-bytes", o_.weight_bytes,
                    "bytes per weight for the per-operator phases (e.g. 0.5625 = Q4_K)");
    cmd->add_option("--gemm-gflops-by-rows", o_.gemm_gflops_by_rows,
                           "override: layer GEMM rate by row count, rows:gflops,...");
    cmd->add_option("--attention-gflops", o_.attention_gflops, "override");
    cmd->add_option("--row-op-gbs", o_.row_op_gbs, "override (norms, RoPE, SwiGLU)");
    cmd->add_option("--rerotate-gbs", o_.rerotate_gbs, "override (key re-rotation)");
    cmd->add_option("--alloc-gbs", o_.alloc_gbs, "override (fused-cache allocation)");
    cmd->add_option("--chunks", o_.workload.chunks)->capture_default_str();
    cmd->add_option("--chunk-tokens", o_.workload.chunk_tokens)->capture_default_str();
    cmd->add_option("--query-tokens", o_.workload.query_tokens)->capture_default_str();
    cmd->add_option("--ratios", o_.workload.ratios)->delimiter(',')->capture_default_str();
    cmd->add_option("--r-min", o_.workload.r_min)->capture_default_str();
    cmd->add_option("--r-max", o_.workload.r_max)->capture_default_str();
    cmd->add_option("--decode-batch", o_.workload.decode_batch,
                    "batch of the per-operator decode phase")
        ->capture_default_str();
    cmd->add_option("--devices", o_.workload.devices,
                    "devices one replica spans (per-operator phases are per device)")
        ->capture_default_str();
    cmd->add_option("--parallel", o_.parallel, "none|tp|ep: how the replica is split")
        ->capture_default_str();
    cmd->add_option("--validate", o_.validate,
                    "only: predict the published figures of this file "
                    "(bench/planner/published.tsv)");
    cmd->add_option("--roofline", o_.roofline, "write the roofline plot of the operators (PNG)");
    auto& c = o_.workload.corpus;
    auto& p = o_.workload.prices;
    cmd->add_option("--corpus-tokens", c.corpus_tokens,
                    "capacity/break-even plan for a corpus of this many tokens (0: none)")
        ->capture_default_str();
    cmd->add_option("--request-rate", c.requests_per_s, "requests per second")
        ->capture_default_str();
    cmd->add_option("--output-tokens", c.output_tokens, "decoded tokens per request")
        ->capture_default_str();
    cmd->add_option("--kv-tier", o_.kv_tier, "ram|ssd|redis: where the corpus KV lives");
    cmd->add_option("--device-usd-per-hour", p.device_usd_per_hour, "assumed price")
        ->capture_default_str();
    cmd->add_option("--ram-usd-per-gb", p.ram_usd_per_gb, "assumed DRAM purchase price")
        ->capture_default_str();
    cmd->add_option("--ssd-usd-per-gb", p.ssd_usd_per_gb, "assumed NVMe purchase price")
        ->capture_default_str();
    cmd->add_option("--redis-usd-per-gb", p.remote_usd_per_gb, "assumed remote DRAM price")
        ->capture_default_str();
    cmd->add_option("--amortize-months", p.amortize_months, "storage purchase spread over")
        ->capture_default_str();
    cmd->add_option("--refresh-days", p.refresh_days, "corpus re-precomputed every")
        ->capture_default_str();
    cmd->add_flag("--json", o_.json, "JSON instead of the table");
  }
  int Run() override {
    absl::StatusOr<blend::Plan> p = RunPlanCommand(o_, std::cout);
    if (!p.ok()) {
      std::fprintf(stderr, "ragkv plan: %s\n", p.status().ToString().c_str());
      return 1;
    }
    return 0;
  }

 private:
  PlanCommandOptions o_;
};

}  // namespace

std::unique_ptr<Command> NewPlanCommand() { return std::make_unique<PlanCommand>(); }

}  // namespace ragkv::cli
