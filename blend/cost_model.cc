#include "blend/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"
#include "blend/blender.h"
#include "blend/internal/lookahead.h"

namespace ragkv::blend {
namespace {

ModelShape Shape(const char* name, int layers, int dim, int heads, int kv_heads, int ffn,
                 int vocab) {
  ModelShape s;
  s.name = name;
  s.layers = layers;
  s.dim = dim;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = dim / heads;
  s.ffn = ffn;
  s.vocab = vocab;
  return s;
}

const std::map<std::string, ModelShape>& ModelPresets() {
  static const auto* presets = new std::map<std::string, ModelShape>{
      {"llama-7b", Shape("llama-7b", 32, 4096, 32, 32, 11008, 32000)},
      {"llama-3-8b", Shape("llama-3-8b", 32, 4096, 32, 8, 14336, 128256)},
      {"llama-3-70b", Shape("llama-3-70b", 80, 8192, 64, 8, 28672, 128256)},
      {"mistral-7b", Shape("mistral-7b", 32, 4096, 32, 8, 14336, 32000)},
      {"qwen2-7b", Shape("qwen2-7b", 28, 3584, 28, 4, 18944, 152064)},
      {"yi-34b", Shape("yi-34b", 60, 7168, 56, 8, 20480, 64000)},
  };
  return *presets;
}

HardwareSpec Hw(const char* name, double tflops, double hbm_gbs, double host_gbs, double nvme_gbs,
                double net_gbs) {
  HardwareSpec h;
  h.name = name;
  h.peak_flops = tflops * 1e12;
  h.mem_bw = hbm_gbs * 1e9;
  h.ram_tier_bw = host_gbs * 1e9;
  h.ssd_tier_bw = nvme_gbs * 1e9;
  h.remote_tier_bw = net_gbs * 1e9;
  h.layer_overhead_s = 20e-6;
  h.collective_latency_s = 10e-6;  // assumed (docs/planner.md "Parallelism")
  return h;
}

// Planner-only ceilings of a preset: dense FP8 / INT8 / FP4 peaks (TFLOP/s,
// 0 = not supported or not published), capacity (GB), device link (GB/s per
// direction) and the source. docs/planner.md "Hardware presets" cites each.
HardwareSpec With(HardwareSpec h, double fp8_tflops, double int8_tops, double fp4_tflops,
                  double capacity_gb, double link_gbs, const char* source) {
  h.peak_fp8_flops = fp8_tflops * 1e12;
  h.peak_int8_ops = int8_tops * 1e12;
  h.peak_fp4_flops = fp4_tflops * 1e12;
  h.mem_capacity_bytes = capacity_gb * 1e9;
  h.device_link_bw = link_gbs * 1e9;
  h.source = source;
  return h;
}

// Dense bf16 tensor-core peaks and memory bandwidths from vendor data sheets;
// host link = achievable PCIe (Gen5 x16 ~55 GB/s, Gen4 x16 ~25 GB/s); NVMe =
// one Gen4 drive (7 GB/s) except the A40 row, which uses the CacheBlend
// paper's 4.8 GB/s; remote = a 100 Gb/s NIC. All overridable by the caller.
const std::map<std::string, HardwareSpec>& HwPresets() {
  static const auto* presets = new std::map<std::string, HardwareSpec>{
      {"h100-sxm", With(Hw("h100-sxm", 989, 3350, 55, 7, 12.5), 1979, 1979, 0, 80, 450,
                        "NVIDIA H100 Tensor Core GPU datasheet (SXM column)")},
      {"h200", With(Hw("h200", 989, 4800, 55, 7, 12.5), 1979, 1979, 0, 141, 450,
                    "NVIDIA H200 Tensor Core GPU datasheet (SXM column)")},
      {"b200", With(Hw("b200", 2250, 8000, 55, 7, 12.5), 4500, 4500, 9000, 180, 900,
                    "NVIDIA HGX B200 (1000 W) per-GPU figures")},
      {"mi300x", With(Hw("mi300x", 1307.4, 5300, 55, 7, 12.5), 2614.9, 2614.9, 0, 192, 448,
                      "AMD Instinct MI300X data sheet")},
      {"a100-80gb", With(Hw("a100-80gb", 312, 2039, 25, 7, 12.5), 0, 624, 0, 80, 300,
                         "NVIDIA A100 datasheet (SXM 80GB)")},
      {"l40s", With(Hw("l40s", 362, 864, 25, 7, 12.5), 733, 733, 0, 48, 0,
                    "NVIDIA L40S datasheet")},
      {"ascend-910b", With(Hw("ascend-910b", 320, 1600, 25, 7, 12.5), 0, 640, 0, 64, 196,
                           "third-party figures (no vendor datasheet found)")},
      {"tpu-v5e", With(Hw("tpu-v5e", 197, 819, 25, 7, 12.5), 0, 393, 0, 16, 200,
                       "Google Cloud TPU v5e documentation")},
      {"a40", With(Hw("a40", 149.7, 696, 25, 4.8, 12.5), 0, 299.3, 0, 48, 56,
                   "NVIDIA A40 datasheet; NVMe as in the CacheBlend paper")},
  };
  return *presets;
}

double LinearWeightsPerLayer(const ModelShape& s) {
  const double q = static_cast<double>(s.heads) * s.head_dim;
  const double kv = static_cast<double>(s.kv_heads) * s.head_dim;
  return s.dim * q + 2.0 * s.dim * kv + q * s.dim + 3.0 * s.dim * static_cast<double>(s.ffn);
}

}  // namespace

absl::StatusOr<ModelShape> ModelPreset(const std::string& name) {
  auto it = ModelPresets().find(name);
  if (it == ModelPresets().end()) {
    return absl::NotFoundError(absl::StrFormat("unknown model preset '%s'", name));
  }
  return it->second;
}

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> out;
  for (const auto& [k, v] : ModelPresets()) out.push_back(k);
  return out;
}

absl::StatusOr<HardwareSpec> HardwarePreset(const std::string& name) {
  auto it = HwPresets().find(name);
  if (it == HwPresets().end()) {
    return absl::NotFoundError(absl::StrFormat("unknown hardware preset '%s'", name));
  }
  return it->second;
}

std::vector<std::string> HardwarePresetNames() {
  std::vector<std::string> out;
  for (const auto& [k, v] : HwPresets()) out.push_back(k);
  return out;
}

std::optional<Tier> CostTierOf(kvstore::TierKind kind) {
  switch (kind) {
    case kvstore::TierKind::kRam: return Tier::kRam;
    case kvstore::TierKind::kSsd: return Tier::kSsd;
    case kvstore::TierKind::kRemote: return Tier::kRemote;
    case kvstore::TierKind::kOther: break;
  }
  return std::nullopt;
}

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kRam: return "ram";
    case Tier::kSsd: return "ssd";
    case Tier::kRemote: return "redis";
  }
  return "?";
}

StageCost CostModel::PrefillLayer(int64_t new_tokens, int64_t cached_tokens) const {
  const double t = static_cast<double>(new_tokens);
  const double p = static_cast<double>(cached_tokens);
  // Keys visible to row i (0-based) are p + i + 1.
  const double visible = t * p + t * (t + 1) / 2;
  return SelectiveLayer(new_tokens, cached_tokens + new_tokens, visible);
}

StageCost CostModel::SelectiveLayer(int64_t rows, int64_t kv_tokens, double visible_keys,
                                    double kv_rows) const {
  const ModelShape& s = shape_;
  const double r = static_cast<double>(rows);
  if (visible_keys <= 0) visible_keys = r * (static_cast<double>(kv_tokens) + 1) / 2;
  const bool subset = kv_rows >= 0 && kv_rows < r;
  if (!subset) kv_rows = r;
  const double kv_w = 2.0 * s.dim * static_cast<double>(s.kv_heads) * s.head_dim;
  StageCost c;
  c.flops = 2.0 * r * (LinearWeightsPerLayer(s) - kv_w) + 2.0 * kv_rows * kv_w +
            4.0 * static_cast<double>(s.heads) * s.head_dim * visible_keys;
  const double weight_bytes = LinearWeightsPerLayer(s) * s.weight_bytes_per_elem;
  // The attention reads the layer's whole KV once (flash-style tiles), and the
  // rows' activations (in, q, attn out, gate, up) are read and written once.
  const double kv_bytes = KvBytesPerLayer(kv_tokens);
  const double act_bytes = r * (4.0 * s.dim + 2.0 * s.ffn) * s.weight_bytes_per_elem;
  c.bytes = weight_bytes + kv_bytes + act_bytes;
  c.attn_flops = 4.0 * static_cast<double>(s.heads) * s.head_dim * visible_keys;
  c.row_bytes = r * RowOpBytes();
  if (subset) {
    // Rows with cached K/V skip RoPE of k (2 kv) and the K/V scatter (4 kv);
    // the projected subset is gathered (2 dim) and copied back (2 * 2 kv).
    const double kv = static_cast<double>(s.kv_heads) * s.head_dim;
    c.row_bytes += 4.0 * ((kv_rows - r) * 6.0 * kv + kv_rows * (2.0 * s.dim + 4.0 * kv));
  }
  c.rows = r;
  return c;
}

double CostModel::RowOpBytes() const {
  const ModelShape& s = shape_;
  const double q = static_cast<double>(s.heads) * s.head_dim;
  const double kv = static_cast<double>(s.kv_heads) * s.head_dim;
  // f32 elements read + written per row: 2 RMSNorms (2 dim each), RoPE of q
  // and k (2 (q + kv)), SwiGLU (3 ffn), K/V scatter (4 kv).
  return 4.0 * (4.0 * s.dim + 2.0 * (q + kv) + 3.0 * s.ffn + 4.0 * kv);
}

double GemmRateAtRows(const std::vector<std::pair<double, double>>& t, double rows,
                      double fallback) {
  if (t.empty()) return fallback;
  if (rows <= t.front().first) return t.front().second;
  if (rows >= t.back().first) return t.back().second;
  for (size_t i = 1; i < t.size(); ++i) {
    if (rows <= t[i].first) {
      const double x0 = std::log(t[i - 1].first), x1 = std::log(t[i].first);
      const double f = x1 > x0 ? (std::log(rows) - x0) / (x1 - x0) : 1.0;
      return t[i - 1].second + f * (t[i].second - t[i - 1].second);
    }
  }
  return t.back().second;
}

double CostModel::GemmFlops(double rows) const {
  return GemmRateAtRows(hw_.gemm_flops_at_rows, rows, hw_.peak_flops);
}

double CostModel::KvBytesPerLayer(int64_t tokens) const {
  const double elems = shape_.kv_elems_per_token > 0
                           ? static_cast<double>(shape_.kv_elems_per_token)
                           : 2.0 * shape_.kv_heads * shape_.head_dim;
  return elems * static_cast<double>(tokens) * shape_.kv_bytes_per_elem;
}

StageCost CostModel::LmHead(int64_t rows) const {
  StageCost c;
  c.flops = 2.0 * static_cast<double>(rows) * shape_.dim * static_cast<double>(shape_.vocab);
  c.bytes = static_cast<double>(shape_.dim) * shape_.vocab * shape_.weight_bytes_per_elem;
  return c;
}

namespace {

// ComputeTime: the compute side of the roofline: GEMM FLOPs at the GEMM rate
// for the stage's row count, attention FLOPs at the attention rate, per-row
// ops at their bandwidth. With no measured rates this is flops / peak.
double ComputeTime(const CostModel& m, const HardwareSpec& hw, const StageCost& c) {
  const double gemm_rate = c.rows > 0 ? m.GemmFlops(c.rows) : hw.peak_flops;
  const double attn_rate = hw.attention_flops > 0 ? hw.attention_flops : hw.peak_flops;
  double t = 0;
  if (gemm_rate > 0) t += (c.flops - c.attn_flops) / gemm_rate;
  if (attn_rate > 0) t += c.attn_flops / attn_rate;
  if (hw.row_op_bytes_per_s > 0) t += c.row_bytes / hw.row_op_bytes_per_s;
  return t;
}

// Keys seen by every row at positions [lo, hi): sum of (p + 1).
double RangeVisible(double lo, double hi) {
  return hi > lo ? (hi * (hi + 1) - lo * (lo + 1)) / 2 : 0;
}

}  // namespace

double CostModel::ComputeSeconds(const StageCost& c) const {
  const double tc = ComputeTime(*this, hw_, c);
  const double tm = hw_.mem_bw > 0 ? c.bytes / hw_.mem_bw : 0;
  return std::max(tc, tm) + hw_.layer_overhead_s;
}

bool CostModel::ComputeBound(const StageCost& c, double* ratio) const {
  const double tc = ComputeTime(*this, hw_, c);
  const double tm = hw_.mem_bw > 0 ? c.bytes / hw_.mem_bw : 0;
  if (ratio != nullptr) {
    const double lo = std::min(tc, tm);
    *ratio = lo > 0 ? std::max(tc, tm) / lo : 0;
  }
  return tc >= tm;
}

double CostModel::TierBandwidth(Tier tier) const {
  switch (tier) {
    case Tier::kRam: return hw_.ram_tier_bw;
    case Tier::kSsd: return hw_.ssd_tier_bw;
    case Tier::kRemote: return hw_.remote_tier_bw;
  }
  return 0;
}

double CostModel::LoadSeconds(int64_t tokens, Tier tier) const {
  const double bw = TierBandwidth(tier);
  return bw > 0 ? KvBytesPerLayer(tokens) / bw : 0;
}

double CostModel::FullPrefillSeconds(int64_t context_tokens, int64_t query_tokens) const {
  return shape_.layers * ComputeSeconds(PrefillLayer(context_tokens + query_tokens, 0)) +
         ComputeSeconds(LmHead(1));
}

double CostModel::PrefixReuseSeconds(int64_t context_tokens, int64_t query_tokens,
                                     int64_t prefix_tokens, Tier tier) const {
  prefix_tokens = std::clamp<int64_t>(prefix_tokens, 0, context_tokens);
  const double load = LoadSeconds(prefix_tokens, tier);
  const double compute =
      ComputeSeconds(PrefillLayer(context_tokens + query_tokens - prefix_tokens, prefix_tokens));
  // Load of layer i+1 overlaps compute of layer i; layer 0's load is exposed.
  return load + (shape_.layers - 1) * std::max(load, compute) + compute +
         ComputeSeconds(LmHead(1));
}

double CostModel::RecomputeSecondsPerLayer(int64_t context_tokens, int64_t query_tokens,
                                           double ratio) const {
  const int64_t n = context_tokens + query_tokens;
  const int64_t rows =
      static_cast<int64_t>(std::ceil(ratio * static_cast<double>(context_tokens))) + query_tokens;
  // Selected context rows see half the KV on average; query rows see all of it.
  const double sel = static_cast<double>(rows - query_tokens);
  const double q = static_cast<double>(query_tokens);
  const double visible = sel * (static_cast<double>(context_tokens) + 1) / 2 +
                         q * static_cast<double>(context_tokens) + q * (q + 1) / 2;
  StageCost c = SelectiveLayer(rows, n, visible);
  // Re-rotation of this layer's cached keys and the merge of fresh rows: one
  // read + write of K plus the scattered rows' K/V.
  c.bytes += KvBytesPerLayer(context_tokens);
  return ComputeSeconds(c);
}

double CostModel::BlendSeconds(int64_t context_tokens, int64_t query_tokens, double ratio,
                               Tier tier) const {
  const double load = LoadSeconds(context_tokens, tier);
  const double rest = RecomputeSecondsPerLayer(context_tokens, query_tokens, ratio);
  // r > 0: layer 0 is recomputed in full (it is the deviation probe). r = 0 is
  // full reuse: only the query rows are computed in every layer.
  const double first =
      ratio > 0 ? ComputeSeconds(PrefillLayer(context_tokens + query_tokens, 0)) : rest;
  double t = load;  // layer 0's load is not hidden
  for (int l = 0; l < shape_.layers; ++l) {
    const double compute = l == 0 ? first : rest;
    const double next_load = l + 1 < shape_.layers ? load : 0;
    t += std::max(compute, next_load);
  }
  return t + ComputeSeconds(LmHead(1));
}

namespace {

double AllocSeconds(const ModelShape& s, const HardwareSpec& hw, int64_t tokens) {
  if (hw.alloc_bytes_per_s <= 0) return 0;
  // The fused cache is f32: layers x {K, V} x kv_heads x tokens x head_dim.
  const double bytes = 2.0 * s.layers * s.kv_heads * s.head_dim * static_cast<double>(tokens) * 4;
  return bytes / hw.alloc_bytes_per_s;
}

// Overlapped: layer 0's load is exposed, then layer l's compute runs while
// layer l+1 loads. Fills total_s and exposed_load_s.
void Overlap(const std::vector<double>& compute, double load_per_layer, RequestPrediction* p) {
  const size_t L = compute.size();
  double t = load_per_layer, busy = 0;
  for (size_t l = 0; l < L; ++l) {
    const double next = l + 1 < L ? load_per_layer : 0;
    t += std::max(compute[l], next);
    busy += compute[l];
  }
  p->load_s = load_per_layer * static_cast<double>(L);
  p->exposed_load_s = t - busy;
  p->total_s = p->open_s + p->alloc_s + t + p->logits_s;
}

// OverlapToNeeds: the loader reads every layer back to back (layer l is
// in at (l + 1) x load); layer l's compute starts once the previous layer
// is done and its first need[l] layers are in (l + 1, or more where a
// check's look-ahead reads further). Fills total_s and exposed_load_s.
void OverlapToNeeds(const std::vector<double>& compute, double load_per_layer,
                    const std::vector<int>& need, RequestPrediction* p) {
  const size_t L = compute.size();
  double t = 0, busy = 0;
  for (size_t l = 0; l < L; ++l) {
    t = std::max(t, static_cast<double>(need[l]) * load_per_layer) + compute[l];
    busy += compute[l];
  }
  p->load_s = load_per_layer * static_cast<double>(L);
  p->exposed_load_s = t - busy;
  p->total_s = p->open_s + p->alloc_s + t + p->logits_s;
}

// LookaheadNeeds: the look-ahead from the first check of `schedule`, each
// check reaching `horizon` layers past it (0: every layer, at the first),
// at `per_layer` seconds a layer reached: adds each check's advance to its
// compute and to p->selection_s, and returns how many layers each layer's
// compute needs loaded (l + 1, or what its check reads).
std::vector<int> LookaheadNeeds(const std::vector<CheckLayer>& schedule, int layers, int horizon,
                                double per_layer, std::vector<double>* compute,
                                RequestPrediction* p) {
  std::vector<int> need(layers);
  for (int l = 0; l < layers; ++l) need[l] = l + 1;
  int reached = schedule[0].layer;
  for (const CheckLayer& c : schedule) {
    const int to = internal::LookaheadTarget(c.layer, horizon, layers);
    if (to <= reached) continue;
    const double la = (to - reached) * per_layer;
    p->selection_s += la;
    (*compute)[c.layer] += la;
    need[c.layer] = to + 1;
    reached = to;
  }
  return need;
}

}  // namespace

RequestPrediction CostModel::PredictFullPrefill(const RequestShape& r) const {
  const int64_t n = r.context_tokens + r.query_tokens;
  RequestPrediction p;
  p.alloc_s = AllocSeconds(shape_, hw_, n);
  const double layer = ComputeSeconds(PrefillLayer(n, 0));
  p.layer0_s = layer;
  p.recompute_s = (shape_.layers - 1) * layer;
  p.logits_s = ComputeSeconds(LmHead(1));
  p.total_s = p.alloc_s + p.layer0_s + p.recompute_s + p.logits_s;
  return p;
}

RequestPrediction CostModel::PredictPrefix(const RequestShape& r, Tier tier) const {
  const int64_t n = r.context_tokens + r.query_tokens;
  const int64_t prefix = std::clamp<int64_t>(r.exact_prefix_tokens, 0, r.context_tokens);
  RequestPrediction p;
  if (r.cached_chunks > 0) p.open_s = hw_.tier_open_s[static_cast<int>(tier)];
  p.alloc_s = AllocSeconds(shape_, hw_, n);
  p.logits_s = ComputeSeconds(LmHead(1));
  const double layer = ComputeSeconds(PrefillLayer(n - prefix, prefix));
  p.layer0_s = layer;
  p.recompute_s = (shape_.layers - 1) * layer;
  // The prefix sits at offset 0: loaded, never re-rotated.
  Overlap(std::vector<double>(shape_.layers, layer), LoadSeconds(prefix, tier), &p);
  return p;
}

RequestPrediction CostModel::PredictBlend(const RequestShape& r, double ratio, Tier tier) const {
  const ModelShape& s = shape_;
  const double C = static_cast<double>(r.context_tokens);
  const double Q = static_cast<double>(r.query_tokens);
  const double E = static_cast<double>(std::clamp<int64_t>(r.exact_prefix_tokens, 0,
                                                           r.context_tokens));
  const double S = C - E;  // selectable rows
  const double N = C + Q;
  const double kv = static_cast<double>(s.kv_heads) * s.head_dim;
  RequestPrediction p;
  p.open_s = static_cast<double>(r.cached_chunks) * hw_.tier_open_s[static_cast<int>(tier)];
  p.alloc_s = AllocSeconds(s, hw_, r.context_tokens + r.query_tokens);
  p.logits_s = ComputeSeconds(LmHead(1));
  // Per layer: load the whole context, re-rotate every chunk but the first.
  double load = LoadSeconds(r.context_tokens, tier);
  if (hw_.rerotate_bytes_per_s > 0) load += S * kv * 4 / hw_.rerotate_bytes_per_s;
  BlendOptions bo;
  bo.ratio = ratio;
  const std::vector<CheckLayer> schedule = MakeSchedule(bo, s.layers);
  // Layer 0 recomputes every non-exact row (r > 0) or the query only (r = 0).
  const std::vector<LayerRows> kept = RowsByLayer(schedule, s.layers, S, ratio > 0);
  std::vector<double> compute(s.layers, 0);
  for (int l = 0; l < s.layers; ++l) {
    double selection = 0;
    bool probed = false;
    const double cand = kept[l].probed;  // the check's candidates, if any
    if (cand > 0) {
      // Probe: Model::ProjectKV of the candidates runs the layer's k/v
      // projection after the attention RMSNorm, RoPE on k, and copies K/V
      // out; then gathers of the hidden rows and cached K/V, the
      // deviation, the scatter of the probe's K/V and the compaction of
      // the hidden rows. f32 elements read + written per candidate: norm
      // 2 dim, RoPE 2 kv, K/V copy 4 kv, gathers 2 dim + 4 kv, deviation
      // 4 kv, scatter 4 kv, compaction 2 dim.
      StageCost probe;
      probe.flops = 2.0 * cand * s.dim * (2 * kv);
      probe.rows = cand;
      probe.row_bytes = cand * 4.0 * (6.0 * s.dim + 2.0 * kv + 16.0 * kv);
      selection = ComputeTime(*this, hw_, probe);
      probed = bo.scatter_probe_kv;
    }
    const double sel = kept[l].selected;
    // Selected rows are spread over [E, C); query rows sit at [C, N).
    const double visible =
        (l == 0 && ratio > 0) ? RangeVisible(E, N) : sel * ((E + C + 1) / 2) + RangeVisible(C, N);
    const double rows = sel + Q;
    // Selected rows whose K/V are exact in the cache (layer 0's loaded
    // values, a probe's fresh ones) project only Q: K/V for the query rows.
    const bool reuse = bo.reuse_exact_kv && sel > 0 && (l == 0 || probed);
    const double fwd = ComputeSeconds(SelectiveLayer(static_cast<int64_t>(rows),
                                                     r.context_tokens + r.query_tokens, visible,
                                                     reuse ? Q : -1.0));
    (l == 0 ? p.layer0_s : p.recompute_s) += fwd;
    p.selection_s += selection;
    compute[l] = fwd + selection;
  }
  if (!r.query_lookahead || ratio <= 0 || schedule.empty() || Q <= 0) {
    Overlap(compute, load, &p);
    return p;
  }
  // The look-ahead: the query rows forwarded on from the first check, and
  // their scores against the context at each layer they reach (a query
  // projection and Q x C logits). Each check first reaches check +
  // horizon (every layer without one), and waits for those layers' loads.
  const double q_dim = static_cast<double>(s.heads) * s.head_dim;
  StageCost scores;
  scores.flops = 2.0 * Q * s.dim * q_dim + 2.0 * Q * q_dim * C;
  scores.attn_flops = 2.0 * Q * q_dim * C;
  scores.bytes = s.dim * q_dim * s.weight_bytes_per_elem + C * kv * 4;  // wq, the f32 keys
  scores.rows = Q;
  const double per_layer =
      ComputeSeconds(
          SelectiveLayer(r.query_tokens, r.context_tokens + r.query_tokens, RangeVisible(C, N))) +
      ComputeTime(*this, hw_, scores);
  const std::vector<int> need =
      LookaheadNeeds(schedule, s.layers, r.lookahead_layers, per_layer, &compute, &p);
  OverlapToNeeds(compute, load, need, &p);
  return p;
}

double CostModel::MaxHiddenRatio(int64_t context_tokens, int64_t query_tokens, Tier tier) const {
  const double load = LoadSeconds(context_tokens, tier);
  if (RecomputeSecondsPerLayer(context_tokens, query_tokens, 0) > load) return 0;
  if (RecomputeSecondsPerLayer(context_tokens, query_tokens, 1) <= load) return 1;
  double lo = 0, hi = 1;
  for (int i = 0; i < 40; ++i) {
    const double mid = (lo + hi) / 2;
    if (RecomputeSecondsPerLayer(context_tokens, query_tokens, mid) <= load) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

Decision ChooseRatioAndTier(const CostModel& model, int64_t context_tokens, int64_t query_tokens,
                            double r_min, double r_max, const std::vector<Tier>& available) {
  // Storage cost per byte, cheapest first: local SSD, the shared remote tier
  // (RAM on other machines, amortised over the sidecars sharing it), local RAM.
  static constexpr Tier kCheapestFirst[] = {Tier::kSsd, Tier::kRemote, Tier::kRam};
  Decision d;
  const double recompute_min = model.RecomputeSecondsPerLayer(context_tokens, query_tokens, r_min);
  for (Tier t : kCheapestFirst) {
    if (std::find(available.begin(), available.end(), t) == available.end()) continue;
    const double load = model.LoadSeconds(context_tokens, t);
    if (load <= recompute_min) {
      d.tier = t;
      d.ratio = r_min;
      d.load_s_per_layer = load;
      d.recompute_s_per_layer = recompute_min;
      d.predicted_ttft_s = model.BlendSeconds(context_tokens, query_tokens, r_min, t);
      d.why = absl::StrFormat(
          "cheapest tier (%s) whose per-layer load (%.3f ms) hides under recompute at "
          "r_min=%.2f (%.3f ms)",
          TierName(t), load * 1e3, r_min, recompute_min * 1e3);
      return d;
    }
  }
  // Loading is the bottleneck on every tier: take the fastest, and spend the
  // slack on more recompute (free quality) up to r_max.
  bool found = false;
  for (Tier t : available) {
    const double r = std::clamp(
        std::max(r_min, model.MaxHiddenRatio(context_tokens, query_tokens, t)), r_min, r_max);
    const double ttft = model.BlendSeconds(context_tokens, query_tokens, r, t);
    if (!found || ttft < d.predicted_ttft_s) {
      found = true;
      d.tier = t;
      d.ratio = r;
      d.predicted_ttft_s = ttft;
      d.load_s_per_layer = model.LoadSeconds(context_tokens, t);
      d.recompute_s_per_layer = model.RecomputeSecondsPerLayer(context_tokens, query_tokens, r);
    }
  }
  if (!found) {
    d.ratio = r_min;
    d.why = "no tier holds the chunks";
    return d;
  }
  d.why = absl::StrFormat(
      "loading is the bottleneck on every tier; fastest tier %s (%.3f ms/layer); recompute "
      "raised to r=%.2f, which still hides under loading (%.3f ms/layer)",
      TierName(d.tier), d.load_s_per_layer * 1e3, d.ratio, d.recompute_s_per_layer * 1e3);
  return d;
}

double LookaheadWait(const CostModel& model, int64_t context_tokens, int64_t query_tokens,
                     double ratio, Tier tier, int lookahead_layers) {
  RequestShape r;
  r.context_tokens = context_tokens;
  r.query_tokens = query_tokens;
  const RequestPrediction plain = model.PredictBlend(r, ratio, tier);
  r.query_lookahead = true;
  r.lookahead_layers = lookahead_layers;
  const RequestPrediction ahead = model.PredictBlend(r, ratio, tier);
  const double wait = (ahead.total_s - plain.total_s) - (ahead.selection_s - plain.selection_s);
  return std::max(0.0, wait);
}

// ChooseLookahead keeps the configured horizon or drops the look-ahead: it
// does not narrow it. On a 16-layer trained checkpoint, horizons of 1-8
// layers kept at most a third of the full look-ahead's gain over
// attended-deviation on dev (docs/blend.md "The look-ahead's horizon"),
// less than a slightly higher ratio buys for their compute.
void ChooseLookahead(const CostModel& cm, int64_t context_tokens, int64_t query_tokens,
                     int configured, Decision* d) {
  const double wait =
      LookaheadWait(cm, context_tokens, query_tokens, d->ratio, d->tier, configured);
  if (wait <= kLookaheadWaitShare * d->predicted_ttft_s) {
    d->lookahead_layers = configured;
    return;
  }
  d->lookahead = false;
  d->why = absl::StrFormat(
      "%s; attended-deviation: the look-ahead would wait %.3f ms for its "
      "layers from %s",
      d->why, wait * 1e3, TierName(d->tier));
}

}  // namespace ragkv::blend
