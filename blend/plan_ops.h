// plan_ops.h: per-operator roofline accounting of the planner's phases.
//
// For a ModelArch (blend/plan_arch.h) on a HardwareSpec, each phase (prefill,
// decode of one output token for a batch, CacheBlend at ratio r, full reuse,
// KV load per tier) is a list of operators summed over layers: QKV and output
// projections, attention score and value, MLA's latent projections, the FFN
// or the MoE router, routed and shared experts, linear attention's
// projections and recurrence, the classifier, and loading cached KV. Each
// operator carries FLOPs, bytes moved through device memory, arithmetic
// intensity, its bound (compute, memory, link or capacity), roofline time and
// share of the phase. Every formula is in docs/planner.md. Pure computation;
// thread-compatible.
#ifndef RAGKV_BLEND_PLAN_OPS_H_
#define RAGKV_BLEND_PLAN_OPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/cost_model.h"
#include "blend/plan_arch.h"

namespace ragkv::blend {

// LayerLoad: the work one layer does in one step.
struct LayerLoad {
  double rows = 0;            // rows through the projections (GEMM M)
  double visible_keys = 0;    // sum over rows of the keys each attends to
  double kv_read_tokens = 0;  // tokens whose cached K/V (or latent) attention reads
  double moe_tokens = 0;      // tokens routed together (distinct experts touched)
  double sequences = 1;       // sequences (recurrent states read and written)
  // kv_rows: rows that project K and V (>= 0); the other rows take K/V from
  // the cache and project only Q (the Blender's reuse of exact cached K/V).
  // < 0: every row.
  double kv_rows = -1;
};

// OpCost: one operator. `weight_bytes` is the part of `bytes` that is weights
// (what a capacity shortfall would have to stream from elsewhere).
struct OpCost {
  std::string op;
  double flops = 0;
  double bytes = 0;
  double weight_bytes = 0;
  double intensity = 0;  // flops / bytes
  std::string bound;     // "compute", "memory", "link" or "capacity"
  double time_s = 0;
  double share = 0;      // time_s / sum of the phase's operator times
  // collectives: calls of a device-link collective (blend/plan_parallel.h);
  // > 0 makes the operator link-bound: time = bytes / link + calls x latency.
  double collectives = 0;
  // gemm_rows: GEMM M of one layer's instance of the operator (a MoE
  // expert's: its share of the token-expert pairs); 0 for an operator that is
  // not a weight GEMM. Set by LayerOps; after a phase sums layers, the last
  // layer's value.
  double gemm_rows = 0;
  // compute_s: the compute side of the roofline, summed over layers, each
  // layer's FLOPs at the rate for its rows: a weight GEMM at the hardware's
  // GEMM rate for gemm_rows (HardwareSpec::gemm_flops_at_rows, else the
  // peak), attention (attn.score, attn.value) at attention_flops (else the
  // peak), any other operator at the peak. time_s = max(compute_s,
  // bytes / bandwidth).
  double compute_s = 0;
};

// LayerOps: FLOPs, bytes and weight bytes of the operators of layer `layer`
// (time, bound, share not yet set). MLA uses the absorbed form (attention
// over the cached latent) when rows < kv_read_tokens, the decompressed form
// (K/V up-projection of every read token) otherwise. A sharded architecture
// (blend/plan_parallel.h ShardArch) counts one device's share and appends
// the layer's collectives.
std::vector<OpCost> LayerOps(const ModelArch& a, int layer, const LayerLoad& load);

// DistinctExperts: expected number of distinct experts of `experts` touched
// when `tokens` tokens each pick `active` of them uniformly:
// E * (1 - (1 - k/E)^tokens).
double DistinctExperts(double experts, double active, double tokens);

// Phase: operators of one phase, summed over layers and timed.
struct Phase {
  std::string name;       // e.g. "prefill", "decode", "blend r=0.15 ram", "kv-load"
  std::vector<OpCost> ops;
  double compute_s = 0;   // sum of operator times (+ per-layer overhead)
  double load_s = 0;      // KV loading from the tier (overlapped with compute)
  double time_s = 0;      // the phase's time (see docs/planner.md)
  std::string bound;      // the bound holding most of the phase's time
  double footprint_bytes = 0;  // weights + KV (+ recurrent state) resident
  bool fits = true;       // footprint <= hardware capacity (unknown capacity: true)
};

// PrefillPhase: `tokens` new tokens from an empty cache in each of
// `sequences` sequences prefilled together (one batch); the classifier runs
// on each sequence's last row.
Phase PrefillPhase(const ModelArch& a, const HardwareSpec& hw, int64_t tokens,
                   int64_t sequences = 1);
// DecodePhase: one output token for each of `batch` sequences holding
// `context_tokens` tokens each (time_s = time per output token).
Phase DecodePhase(const ModelArch& a, const HardwareSpec& hw, int64_t batch,
                  int64_t context_tokens);
// BlendPhase: CacheBlend at `ratio` (0 = full reuse) over `context_tokens`
// cached tokens and `query_tokens` new ones, KV loaded from `tier`, as the
// Blender runs it (blend/blender.h defaults): the first
// `exact_prefix_tokens` cached tokens sit at their precomputed offset and
// are never recomputed; of the other S (selectable) tokens layer 0
// recomputes all when ratio > 0, then each check layer of MakeSchedule
// (its default: BlendOptions::gradual_steps layers from layer 1, r1 =
// min(1, 2r) geometrically down to r; a sliding-window model starts at its
// first global layer) probes the still-selected rows ("blend.probe": their
// K/V projection; "blend.select": gathers, deviation, scatter, compaction)
// and keeps round(r_i x S); the layers after recompute the kept rows and
// the query. Rows whose cached K/V are exact (layer 0, a probed layer)
// project only Q. FailedPrecondition when the model is not chunk-reusable
// (CheckChunkReusable).
absl::StatusOr<Phase> BlendPhase(const ModelArch& a, const HardwareSpec& hw,
                                 int64_t context_tokens, int64_t query_tokens, double ratio,
                                 Tier tier, int64_t exact_prefix_tokens = 0);
// BlendRowsByLayer: rows recomputed (selected context + query) in each layer
// of BlendPhase and, per layer, the candidates probed there (0: no check).
struct BlendLayerRows {
  double rows = 0;
  double probed = 0;
};
std::vector<BlendLayerRows> BlendRowsByLayer(const ModelArch& a, int64_t context_tokens,
                                             int64_t query_tokens, double ratio,
                                             int64_t exact_prefix_tokens = 0);
// KvLoadPhase: loading the KV of `context_tokens` tokens from each tier
// (operators "kv_load.hbm", ".ram", ".ssd", ".redis"), each on its own;
// time_s is the RAM tier's.
Phase KvLoadPhase(const ModelArch& a, const HardwareSpec& hw, int64_t context_tokens);

// PeakFlops: the hardware's dense peak for the architecture's precision
// (FP8 falls back to peak_flops when the device has no FP8 peak).
double PeakFlops(const ModelArch& a, const HardwareSpec& hw);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLAN_OPS_H_
