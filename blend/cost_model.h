// cost_model.h: FLOPs, bytes and roofline time of the blend path's stages.
//
// One analytical model shared by the LoadingController (which calibrates it
// with measured CPU figures) and the planner (`ragkv plan`, which feeds it GPU
// presets). Per layer it counts the FLOPs and bytes of
//   - a prefill of T new tokens after P cached ones,
//   - a selective recompute of R rows against a KV of N tokens,
//   - loading the cached KV of N tokens from a storage tier,
// and turns them into time with a roofline: t = max(flops / peak_flops,
// bytes / memory_bw) (+ a fixed per-layer overhead). When the HardwareSpec
// carries measured kernel rates (a CPU calibration), the compute side is
// split into GEMM FLOPs at the GEMM rate for the row count, attention FLOPs
// at the attention rate and per-row elementwise bytes at their bandwidth;
// the Predict* methods add the request-level terms (stream opening, fused-
// cache allocation, probes, re-rotation) stage by stage. Pure value type:
// thread-compatible, no I/O.
#ifndef RAGKV_BLEND_COST_MODEL_H_
#define RAGKV_BLEND_COST_MODEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/tier.h"

namespace ragkv::blend {

// ModelShape: the transformer dimensions that drive cost.
struct ModelShape {
  std::string name;
  int layers = 0;
  int dim = 0;        // hidden size
  int heads = 0;      // query heads
  int kv_heads = 0;   // key/value heads
  int head_dim = 0;   // usually dim / heads
  int ffn = 0;        // MLP hidden size (SwiGLU: gate, up, down)
  int vocab = 0;
  int weight_bytes_per_elem = 2;  // bf16 weights on GPU; 4 for the CPU f32 runtime
  int kv_bytes_per_elem = 2;      // fp16 KV in the store
  // kv_elems_per_token: KV elements one token stores per layer; 0 means
  // 2 * kv_heads * head_dim (K and V). Set for shapes whose cache is not
  // per-head K/V (MLA's latent: kv_lora_rank + rope dims; blend/plan_arch.h).
  int kv_elems_per_token = 0;
};

// Presets: "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2-7b", "yi-34b",
// "llama-7b" (Llama-1/2 7B, the CacheBlend paper's model).
absl::StatusOr<ModelShape> ModelPreset(const std::string& name);
std::vector<std::string> ModelPresetNames();

// HardwareSpec: roofline ceilings of one device and its storage paths.
// All bandwidths in bytes/s, compute in FLOP/s.
struct HardwareSpec {
  std::string name;
  double peak_flops = 0;      // dense bf16 (GPU) or measured sgemm (CPU)
  double mem_bw = 0;          // HBM / DRAM bandwidth
  double ram_tier_bw = 0;     // KV from host RAM (PCIe/NVLink-C2C for GPUs, memcpy for CPU)
  double ssd_tier_bw = 0;     // KV from local NVMe
  double remote_tier_bw = 0;  // KV from the shared Redis tier (network)
  double layer_overhead_s = 0;  // fixed cost per layer launch / dispatch

  // Measured kernel rates (services::MeasureCpu with a model shape; the
  // accelerator presets leave them unset = pure roofline). Used by the
  // Predict* methods; 0 / empty means "not modelled", which reproduces the
  // roofline exactly.
  // gemm_flops_at_rows: FLOP/s of one layer's linear projections (q/k/v, o,
  // gate/up, down) over a given number of rows, pairs (rows, FLOP/s) sorted
  // by rows; interpolated linearly in log(rows), clamped at both ends.
  // Empty: peak_flops at every size.
  std::vector<std::pair<double, double>> gemm_flops_at_rows;
  double attention_flops = 0;      // attention kernel FLOP/s (0: peak_flops)
  // row_op_bytes_per_s: f32 bytes/s of the per-row non-GEMM work of a layer
  // (two RMSNorms, RoPE of q and k, SwiGLU, K/V scatter into the cache; see
  // CostModel::RowOpBytes) and of the selection's gathers / probe.
  double row_op_bytes_per_s = 0;
  // rerotate_bytes_per_s: f32 key bytes re-rotated per second (RoPE delta
  // applied to cached keys moved to a new offset).
  double rerotate_bytes_per_s = 0;
  // alloc_bytes_per_s: bytes/s of allocating and zero-filling a fresh f32
  // KV cache (page faults included).
  double alloc_bytes_per_s = 0;
  // tier_open_s: seconds to open one cached chunk's stream (lookup + header)
  // on each tier, indexed by Tier; paid before the blend starts (0: not
  // modelled).
  double tier_open_s[3] = {0, 0, 0};

  // Planner-only ceilings (blend/plan_ops.h; 0 = unknown / not supported,
  // the planner then falls back as documented in docs/planner.md).
  double peak_fp8_flops = 0;   // dense FP8 tensor peak (0: use peak_flops)
  double peak_int8_ops = 0;    // dense INT8 peak (informational)
  double peak_fp4_flops = 0;   // dense FP4 peak (informational)
  double mem_capacity_bytes = 0;  // HBM / DRAM capacity of one device (0: unlimited)
  double device_link_bw = 0;   // device link (NVLink, xGMI, HCCS, ICI), bytes/s per direction
  // collective_latency_s: fixed cost of one all-reduce / all-to-all call
  // across the devices of a replica (blend/plan_parallel.h; assumed, see
  // docs/planner.md).
  double collective_latency_s = 0;
  std::string source;          // where the figures come from (docs/planner.md)
};

// Presets: "h100-sxm", "h200", "b200", "mi300x", "a100-80gb", "l40s",
// "ascend-910b", "tpu-v5e", "a40" (figures and sources: docs/planner.md).
absl::StatusOr<HardwareSpec> HardwarePreset(const std::string& name);
std::vector<std::string> HardwarePresetNames();

// GemmRateAtRows: the FLOP/s of a GEMM of `rows` rows from a table of
// (rows, FLOP/s) pairs sorted by rows (HardwareSpec::gemm_flops_at_rows):
// linear in log(rows) between entries, clamped to the first and last entry
// outside them; `fallback` when the table is empty. Used by the stage model
// (CostModel::GemmFlops) and the per-operator phases (blend/plan_ops.h).
double GemmRateAtRows(const std::vector<std::pair<double, double>>& table, double rows,
                      double fallback);

enum class Tier { kRam = 0, kSsd = 1, kRemote = 2 };
const char* TierName(Tier tier);
// CostTierOf: the cost model's tier of a store tier's kind (nullopt for
// kvstore::TierKind::kOther: not priced).
std::optional<Tier> CostTierOf(kvstore::TierKind kind);

// StageCost: work of one stage of one layer.
struct StageCost {
  double flops = 0;
  double bytes = 0;  // bytes that must cross the bottleneck memory (weights + KV + activations)
  double attn_flops = 0;  // the part of `flops` spent in attention (QK^T, PV)
  double row_bytes = 0;   // f32 bytes of the per-row non-GEMM work (RowOpBytes)
  double rows = 0;        // rows of the linear projections (GEMM M)
};

// RequestShape: one prompt as the Blender sees it.
struct RequestShape {
  int64_t context_tokens = 0;  // cached chunk tokens
  int64_t query_tokens = 0;
  // exact_prefix_tokens: leading cached tokens that already sit at their
  // precomputed offset (the Blender's first chunk): never recomputed by
  // CacheBlend, never re-rotated, and the prefix of prefix caching.
  int64_t exact_prefix_tokens = 0;
  // cached_chunks: chunk streams opened before blending (prefix caching
  // opens only the first).
  int64_t cached_chunks = 0;
  // query_lookahead: the Blender's lookahead-deviation selector (its
  // default): from the first check layer the query rows run on through the
  // layers after it, which needs those layers loaded there (the loader reads
  // ahead without a prefetch window). Counted in selection_s; the load
  // before each check is exposed where it outlasts the compute.
  bool query_lookahead = false;
  // lookahead_layers: BlendOptions::lookahead_layers: each check's look-
  // ahead reaches only that many layers past it, and waits only for those
  // (0: every layer, all at the first check).
  int lookahead_layers = 0;
};

// RequestPrediction: seconds to first token of one request, by stage (the
// stages of blend::StageTimings). Loading runs beside compute; only
// `exposed_load_s` (layer 0's load, and any layer whose load outlasts the
// previous layer's compute) adds to the total.
struct RequestPrediction {
  double total_s = 0;
  double open_s = 0;         // opening the chunks' streams (tier_open_s each)
  double alloc_s = 0;        // fused-cache allocation + zero fill
  double load_s = 0;         // KV load + re-rotation of every layer (overlapped)
  double exposed_load_s = 0;
  double layer0_s = 0;
  double selection_s = 0;    // probes, deviation, gathers (check layers)
  double recompute_s = 0;    // layers >= 1
  double logits_s = 0;
};

class CostModel {
 public:
  CostModel(ModelShape shape, HardwareSpec hw) : shape_(std::move(shape)), hw_(std::move(hw)) {}

  const ModelShape& shape() const { return shape_; }
  const HardwareSpec& hardware() const { return hw_; }

  // PrefillLayer: one layer over `new_tokens` rows at positions
  // cached..cached+new_tokens-1 with exact causal attention.
  StageCost PrefillLayer(int64_t new_tokens, int64_t cached_tokens = 0) const;
  // SelectiveLayer: `rows` rows recomputed against a KV of `kv_tokens`; each
  // row attends to half the KV on average (uniformly scattered rows) unless
  // `visible_keys` (sum over rows of keys each sees) is given (> 0).
  // `kv_rows` (>= 0) of the rows project K and V; the others take them from
  // the cache and project only Q (BlendOptions::reuse_exact_kv); < 0: all.
  StageCost SelectiveLayer(int64_t rows, int64_t kv_tokens, double visible_keys = 0,
                           double kv_rows = -1) const;
  // KvBytesPerLayer: K and V of `tokens` tokens in the store's dtype.
  double KvBytesPerLayer(int64_t tokens) const;
  // LmHead: final norm + classifier for `rows` rows.
  StageCost LmHead(int64_t rows) const;

  // Seconds for a stage under the roofline (+ per-layer overhead).
  double ComputeSeconds(const StageCost& c) const;
  // Whether a stage is compute-bound (true) or bandwidth-bound (false), and
  // the ratio of the two bounds (>= 1).
  bool ComputeBound(const StageCost& c, double* ratio = nullptr) const;
  double TierBandwidth(Tier tier) const;
  double LoadSeconds(int64_t tokens, Tier tier) const;

  // Whole-request estimates (seconds to first token) for a context of
  // `context_tokens` cached chunk tokens followed by `query_tokens` new ones.
  double FullPrefillSeconds(int64_t context_tokens, int64_t query_tokens) const;
  // Prefix caching: the first `prefix_tokens` come from `tier`, the rest prefilled.
  double PrefixReuseSeconds(int64_t context_tokens, int64_t query_tokens, int64_t prefix_tokens,
                            Tier tier) const;
  // CacheBlend at ratio r (r=0 is full reuse): layer 0 in full, layers 1..L-1
  // recompute r*context + query rows, overlapped with loading layer i+1
  // (per layer max(load, compute)); loading layer 0 is not hidden.
  double BlendSeconds(int64_t context_tokens, int64_t query_tokens, double ratio, Tier tier) const;

  // RecomputeSecondsPerLayer / LoadSecondsPerLayer at ratio r.
  double RecomputeSecondsPerLayer(int64_t context_tokens, int64_t query_tokens, double ratio) const;

  // Predict*: stage-by-stage estimates that follow what blend::Blender
  // does: the exact first chunk, the gradual filtering schedule
  // (blend::MakeSchedule defaults: check layers 1 to 4, r1 = min(1, 2r)),
  // the selection probes, re-rotation on the loader thread, the fused-cache
  // allocation, and the measured kernel rates of HardwareSpec (GEMM
  // efficiency by row count, attention, per-row ops). With those rates
  // unset they reduce to roofline terms. PredictBlend at ratio 0 is full
  // reuse (query rows only, in every layer).
  RequestPrediction PredictFullPrefill(const RequestShape& r) const;
  RequestPrediction PredictPrefix(const RequestShape& r, Tier tier) const;
  RequestPrediction PredictBlend(const RequestShape& r, double ratio, Tier tier) const;

  // GemmFlops: FLOP/s of a layer's projections over `rows` rows.
  double GemmFlops(double rows) const;
  // RowOpBytes: f32 bytes of the per-row non-GEMM work of one layer for one
  // row: RMSNorm x2 (read + write dim), RoPE of q and k (read + write), SwiGLU
  // (read gate and up, write ffn), K/V scatter (read + write 2 kv_dim).
  double RowOpBytes() const;

  // MaxHiddenRatio: the largest r in [0,1] whose per-layer recompute still
  // hides under loading a layer from `tier` (CacheBlend §5); 0 if even r=0
  // does not hide.
  double MaxHiddenRatio(int64_t context_tokens, int64_t query_tokens, Tier tier) const;

 private:
  ModelShape shape_;
  HardwareSpec hw_;
};

// Decision: the loading controller's choice and the reason for it.
struct Decision {
  double ratio = 0;  // chosen recompute ratio
  Tier tier = Tier::kRam;
  double recompute_s_per_layer = 0;
  double load_s_per_layer = 0;
  double predicted_ttft_s = 0;  // ChooseRatioAndTier's, without the look-ahead
  // lookahead: the default selector's query look-ahead may run, reaching
  // lookahead_layers past each check (0: every layer; BlendOptions::
  // lookahead_layers, the configured one), its wait for its layers being
  // small; false: the blend uses attended-deviation instead (LookaheadWait).
  bool lookahead = true;
  int lookahead_layers = 0;
  std::string why;
};

// ChooseRatioAndTier: CacheBlend §5. Among the tiers that hold the chunks
// (`available`, in any order), pick r = max(r_min, MaxHiddenRatio) capped at
// r_max, and the cheapest tier (remote < ssd < ram in storage cost) whose
// loading still hides recompute at r_min; if none hides it, the tier with the
// lowest predicted TTFT at r_min.
Decision ChooseRatioAndTier(const CostModel& model, int64_t context_tokens, int64_t query_tokens,
                            double r_min, double r_max, const std::vector<Tier>& available);

// LookaheadWait: seconds the query look-ahead adds to a blend of `ratio`
// from `tier` beyond its own compute: its wait for the loads of the layers
// it reads, every layer or `lookahead_layers` past each check
// (PredictBlend with and without RequestShape::query_lookahead). 0 when the
// loads hide under the compute before the checks.
double LookaheadWait(const CostModel& model, int64_t context_tokens, int64_t query_tokens,
                     double ratio, Tier tier, int lookahead_layers = 0);

// kLookaheadWaitShare: the share of the predicted TTFT that the look-ahead's
// wait for the layers it reads may add (a judgement, not measured;
// docs/blend.md "The look-ahead's horizon").
inline constexpr double kLookaheadWaitShare = 0.05;

// ChooseLookahead: for the default selector's look-ahead on decision d (its
// ratio, tier and predicted TTFT): the `configured` horizon
// (BlendOptions::lookahead_layers; 0: every layer) when its LookaheadWait
// stays within kLookaheadWaitShare of the TTFT (sets d->lookahead_layers);
// otherwise d->lookahead = false (the blend uses attended-deviation, which
// streams), with why. It never narrows the horizon (cost_model.cc says why).
void ChooseLookahead(const CostModel& model, int64_t context_tokens, int64_t query_tokens,
                     int configured, Decision* d);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_COST_MODEL_H_
