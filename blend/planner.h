// planner.h: the roofline planner behind `ragkv plan`.
//
// Maps a workload (model shape, context, chunk count, query length, ratio) on
// a hardware spec to predicted time to first token per strategy and tier,
// with the bound of each stage, the loading controller's choice, and the KV
// storage cost per million tokens per tier. It uses the same CostModel as the
// loading controller; the TTFT of each row is CostModel::Predict* (first
// chunk exact, gradual schedule, probes). Pure computation; thread-compatible.
#ifndef RAGKV_BLEND_PLANNER_H_
#define RAGKV_BLEND_PLANNER_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "blend/cost_model.h"
#include "blend/plan_advice.h"
#include "blend/plan_arch.h"
#include "blend/plan_capacity.h"
#include "blend/plan_ops.h"

namespace ragkv::blend {

struct PlanWorkload {
  int64_t chunks = 6;
  int64_t chunk_tokens = 512;
  int64_t query_tokens = 32;
  std::vector<double> ratios = {0.05, 0.10, 0.15, 0.20, 0.30};
  double r_min = 0.15;  // quality floor for the controller
  double r_max = 0.50;
  int64_t decode_batch = 8;  // batch of the decode phase (per-operator analysis)
  // Devices one replica spans and how (blend/plan_parallel.h); the
  // per-operator phases and recommendations are per device, the legacy rows
  // stay single-device.
  int devices = 1;
  ParallelKind parallel = ParallelKind::kNone;
  // Capacity and break-even for a corpus (blend/plan_capacity.h), planned
  // when corpus.corpus_tokens > 0 (corpus.chunk_tokens := chunk_tokens);
  // the KV lives on kv_tier (unset: the controller's tier).
  CorpusWorkload corpus;
  CapacityPrices prices;
  std::optional<Tier> kv_tier;
};

// Capacity prices in USD per GB (hardware purchase cost) for the cost column.
struct StoragePrices {
  double ram_usd_per_gb = 3.0;     // server DRAM
  double ssd_usd_per_gb = 0.08;    // datacenter NVMe
  double remote_usd_per_gb = 3.0;  // RAM on the Redis nodes
};

struct PlanRow {
  std::string strategy;  // "full-prefill", "prefix", "full-reuse", "blend r=0.15", "controller"
  std::string tier;      // "-", "ram", "ssd", "redis"
  double ttft_s = 0;
  double speedup = 0;    // full prefill / this
  std::string bound;     // e.g. "compute x3.1" or "load x1.4"
};

struct Plan {
  ModelShape shape;
  HardwareSpec hardware;
  PlanWorkload workload;
  std::vector<PlanRow> rows;
  Decision controller;
  double kv_bytes_per_token = 0;
  double kv_gb_per_million_tokens = 0;
  double usd_per_million_tokens[3] = {0, 0, 0};  // indexed by Tier
  // Per-operator analysis (blend/plan_ops.h, blend/plan_advice.h); empty
  // unless AddArchAnalysis / MakeArchPlan filled it.
  std::vector<Phase> phases;
  std::vector<std::string> recommendations;
  std::string blend_refused;  // why blending / reuse is refused ("" = allowed)
  std::optional<CapacityPlan> capacity;  // when workload.corpus.corpus_tokens > 0
};

// MakePlan: all strategies x tiers for one workload on one device.
Plan MakePlan(const ModelShape& shape, const HardwareSpec& hw, const PlanWorkload& workload,
              const StoragePrices& prices = {});

// AddArchAnalysis: fills plan->phases and plan->recommendations for `arch`
// on plan->hardware (workload: plan->workload; blend at r_min from the
// controller's tier), per device of plan->workload's parallel split (a
// split ShardArch refuses leaves its message as the only recommendation).
// Leaves rows untouched.
void AddArchAnalysis(const ModelArch& arch, Plan* plan);

// MakeArchPlan: MakePlan on ShapeOfArch(arch) (the rows) + AddArchAnalysis.
// For a model that is not chunk-reusable (CheckChunkReusable) the rows hold
// only "full-prefill", timed by the per-operator prefill phase, and
// blend_refused says why.
Plan MakeArchPlan(const ModelArch& arch, const HardwareSpec& hw, const PlanWorkload& workload,
                  const StoragePrices& prices = {});

// PrintPlanTable: Markdown table + controller choice + storage cost.
void PrintPlanTable(const Plan& plan, std::ostream& out);
// PrintPlanJson: the same as one JSON object.
void PrintPlanJson(const Plan& plan, std::ostream& out);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLANNER_H_
