#include "blend/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"

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
  return h;
}

// Dense bf16 tensor-core peaks and memory bandwidths from vendor data sheets;
// host link = achievable PCIe (Gen5 x16 ~55 GB/s, Gen4 x16 ~25 GB/s); NVMe =
// one Gen4 drive (7 GB/s) except the A40 row, which uses the CacheBlend
// paper's 4.8 GB/s; remote = a 100 Gb/s NIC. All overridable by the caller.
const std::map<std::string, HardwareSpec>& HwPresets() {
  static const auto* presets = new std::map<std::string, HardwareSpec>{
      {"h100-sxm", Hw("h100-sxm", 989, 3350, 55, 7, 12.5)},
      {"h200", Hw("h200", 989, 4800, 55, 7, 12.5)},
      {"a100-80gb", Hw("a100-80gb", 312, 2039, 25, 7, 12.5)},
      {"l40s", Hw("l40s", 362, 864, 25, 7, 12.5)},
      {"ascend-910b", Hw("ascend-910b", 320, 1600, 25, 7, 12.5)},
      {"a40", Hw("a40", 149.7, 696, 25, 4.8, 12.5)},
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

StageCost CostModel::SelectiveLayer(int64_t rows, int64_t kv_tokens, double visible_keys) const {
  const ModelShape& s = shape_;
  const double r = static_cast<double>(rows);
  if (visible_keys <= 0) visible_keys = r * (static_cast<double>(kv_tokens) + 1) / 2;
  StageCost c;
  c.flops = 2.0 * r * LinearWeightsPerLayer(s) +
            4.0 * static_cast<double>(s.heads) * s.head_dim * visible_keys;
  const double weight_bytes = LinearWeightsPerLayer(s) * s.weight_bytes_per_elem;
  // The attention reads the layer's whole KV once (flash-style tiles), and the
  // rows' activations (in, q, attn out, gate, up) are read and written once.
  const double kv_bytes = KvBytesPerLayer(kv_tokens);
  const double act_bytes = r * (4.0 * s.dim + 2.0 * s.ffn) * s.weight_bytes_per_elem;
  c.bytes = weight_bytes + kv_bytes + act_bytes;
  return c;
}

double CostModel::KvBytesPerLayer(int64_t tokens) const {
  return 2.0 * shape_.kv_heads * shape_.head_dim * static_cast<double>(tokens) *
         shape_.kv_bytes_per_elem;
}

StageCost CostModel::LmHead(int64_t rows) const {
  StageCost c;
  c.flops = 2.0 * static_cast<double>(rows) * shape_.dim * static_cast<double>(shape_.vocab);
  c.bytes = static_cast<double>(shape_.dim) * shape_.vocab * shape_.weight_bytes_per_elem;
  return c;
}

double CostModel::ComputeSeconds(const StageCost& c) const {
  const double tc = hw_.peak_flops > 0 ? c.flops / hw_.peak_flops : 0;
  const double tm = hw_.mem_bw > 0 ? c.bytes / hw_.mem_bw : 0;
  return std::max(tc, tm) + hw_.layer_overhead_s;
}

bool CostModel::ComputeBound(const StageCost& c, double* ratio) const {
  const double tc = hw_.peak_flops > 0 ? c.flops / hw_.peak_flops : 0;
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
          "cheapest tier whose per-layer load (%.3f ms) hides under recompute at r_min=%.2f "
          "(%.3f ms)",
          load * 1e3, r_min, recompute_min * 1e3);
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

}  // namespace ragkv::blend
