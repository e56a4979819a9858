#include "blend/plan_ops.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "blend/blender.h"
#include "blend/plan_parallel.h"

namespace ragkv::blend {
namespace {

// Gemm: `rows` x `in` times `in` x `out` weights: 2·rows·in·out FLOPs; bytes
// = weights once + the rows' input and output activations.
OpCost Gemm(const char* op, double rows, double in, double out, double wb, double ab) {
  OpCost c;
  c.op = op;
  c.flops = 2 * rows * in * out;
  c.weight_bytes = in * out * wb;
  c.bytes = c.weight_bytes + rows * (in + out) * ab;
  c.gemm_rows = rows;
  return c;
}

// Cost: an operator of `flops` FLOPs moving `bytes` bytes and no weights;
// collectives > 0 makes it a device-link collective of that many calls.
OpCost Cost(const char* op, double flops, double bytes, double collectives = 0) {
  OpCost c;
  c.op = op;
  c.flops = flops;
  c.bytes = bytes;
  c.collectives = collectives;
  return c;
}

void GqaOps(const ModelArch& a, const LayerLoad& x, std::vector<OpCost>* out) {
  const double q = static_cast<double>(a.heads) * a.head_dim;
  const double kv = static_cast<double>(a.kv_heads) * a.head_dim;
  const double R = x.rows, ab = a.act_bytes;
  const double qout = q * (a.attn_output_gate ? 2 : 1);
  OpCost qkv = Gemm("attn.qkv", R, a.dim, qout + 2 * kv, a.weight_bytes, ab);
  if (x.kv_rows >= 0 && x.kv_rows < R) {
    // Only kv_rows rows project K and V (the rest have exact K/V cached).
    qkv.flops = 2 * R * a.dim * qout + 2 * x.kv_rows * a.dim * 2 * kv;
    qkv.bytes = qkv.weight_bytes + R * (a.dim + qout) * ab + x.kv_rows * 2 * kv * ab;
  }
  out->push_back(qkv);
  const double hd = static_cast<double>(a.heads) * a.head_dim;
  out->push_back(Cost("attn.score", 2 * hd * x.visible_keys,
                      x.kv_read_tokens * kv * a.kv_bytes + R * q * ab));
  out->push_back(Cost("attn.value", 2 * hd * x.visible_keys,
                      x.kv_read_tokens * kv * a.kv_bytes + R * q * ab));
  out->push_back(Gemm("attn.out", R, q, a.dim, a.weight_bytes, ab));
}

void MlaOps(const ModelArch& a, const LayerLoad& x, std::vector<OpCost>* out) {
  const double R = x.rows, ab = a.act_bytes, wb = a.weight_bytes, H = a.heads;
  const double qk = a.qk_nope_dim + a.qk_rope_dim, lat = a.kv_lora_rank;
  if (a.q_lora_rank > 0) {
    out->push_back(Gemm("mla.q_down", R, a.dim, a.q_lora_rank, wb, ab));
    out->push_back(Gemm("mla.q_up", R, a.q_lora_rank, H * qk, wb, ab));
  } else {
    out->push_back(Gemm("mla.q_proj", R, a.dim, H * qk, wb, ab));
  }
  const double kv_rows = x.kv_rows >= 0 ? std::min(x.kv_rows, R) : R;
  out->push_back(Gemm("mla.kv_down", kv_rows, a.dim, lat + a.qk_rope_dim, wb, ab));
  const double latent_bytes = x.kv_read_tokens * (lat + a.qk_rope_dim) * a.kv_bytes;
  if (R < x.kv_read_tokens) {
    // Absorbed: q_nope · W_UK per head into the latent space, attention over
    // the latent (+ rope part), the latent output · W_UV per head.
    OpCost absorb = Gemm("mla.absorb", R, 0, 0, wb, ab);
    absorb.flops = 2 * R * H * a.qk_nope_dim * lat + 2 * R * H * lat * a.v_head_dim;
    absorb.weight_bytes = lat * H * (a.qk_nope_dim + a.v_head_dim) * wb;
    absorb.bytes = absorb.weight_bytes + R * H * (a.qk_nope_dim + 2 * lat + a.v_head_dim) * ab;
    out->push_back(absorb);
    out->push_back(Cost("attn.score", 2 * H * (lat + a.qk_rope_dim) * x.visible_keys,
                        latent_bytes + R * H * (lat + a.qk_rope_dim) * ab));
    out->push_back(Cost("attn.value", 2 * H * lat * x.visible_keys, R * H * lat * ab));
  } else {
    // Decompressed: K (nope part) and V up-projected for every read token.
    out->push_back(Gemm("mla.kv_up", x.kv_read_tokens, lat, H * (a.qk_nope_dim + a.v_head_dim),
                        wb, ab));
    out->push_back(Cost("attn.score", 2 * H * qk * x.visible_keys,
                        x.kv_read_tokens * H * qk * ab + R * H * qk * ab));
    out->push_back(Cost("attn.value", 2 * H * a.v_head_dim * x.visible_keys,
                        x.kv_read_tokens * H * a.v_head_dim * ab + R * H * a.v_head_dim * ab));
  }
  out->push_back(Gemm("attn.out", R, H * a.v_head_dim, a.dim, wb, ab));
}

void LinearOps(const ModelArch& a, const LayerLoad& x, std::vector<OpCost>* out) {
  const double k = static_cast<double>(a.linear_k_heads) * a.linear_k_dim;
  const double v = static_cast<double>(a.linear_v_heads) * a.linear_v_dim;
  const double R = x.rows, ab = a.act_bytes;
  out->push_back(Gemm("lin.in_proj", R, a.dim, 2 * k + 2 * v + 2.0 * a.linear_v_heads,
                      a.weight_bytes, ab));
  // Per token and value head: S·k, the rank-1 delta update, S·q (2·dk·dv each).
  const double state = static_cast<double>(a.linear_v_heads) * a.linear_k_dim * a.linear_v_dim;
  out->push_back(Cost("lin.recurrence", 6 * state * R, 2 * x.sequences * state * 4));
  out->push_back(Gemm("lin.out", R, v, a.dim, a.weight_bytes, ab));
}

void FfnOps(const ModelArch& a, int layer, const LayerLoad& x, std::vector<OpCost>* out) {
  const double R = x.rows, d = a.dim, ab = a.act_bytes;
  auto mlp = [&](const char* op, double width, double copies, double wb, double weight_copies) {
    OpCost c;
    c.op = op;
    c.flops = 2 * R * copies * 3 * d * width;
    c.weight_bytes = weight_copies * 3 * d * width * wb;
    c.bytes = c.weight_bytes + R * copies * (2 * d + 3 * width) * ab;
    // Each of the weight_copies matrices sees its share of the row copies.
    c.gemm_rows = weight_copies > 0 ? R * copies / weight_copies : 0;
    return c;
  };
  if (!IsMoeLayer(a, layer)) {
    out->push_back(mlp("ffn", a.ffn, 1, a.weight_bytes, 1));
    return;
  }
  out->push_back(Gemm("moe.router", R, d, a.experts, a.weight_bytes, ab));
  // Under expert parallelism this device holds experts / ep of them and gets
  // that share of the token-expert pairs (and of the distinct experts).
  const double ep = a.expert_parallel;
  const double touched = DistinctExperts(a.experts, a.experts_active, x.moe_tokens) / ep;
  out->push_back(mlp("moe.experts", a.expert_ffn, a.experts_active / ep, a.expert_weight_bytes,
                     touched));
  if (a.shared_experts > 0) {
    out->push_back(mlp("moe.shared", a.shared_expert_ffn, a.shared_experts, a.weight_bytes,
                       a.shared_experts));
  }
}

OpCost Collective(const char* op, double bytes, double calls) { return Cost(op, 0, bytes, calls); }

// CollectiveOps: the collectives layer `layer` of a sharded `a` runs for
// `rows` rows (blend/plan_parallel.h); bytes sent per device, calls in
// `collectives`. Empty on one device.
std::vector<OpCost> CollectiveOps(const ModelArch& a, int layer, double rows) {
  std::vector<OpCost> out;
  const double n = a.parallel_devices;
  if (n <= 1) return out;
  const double msg = rows * a.dim * a.act_bytes;  // one rows x dim activation
  const double ring = 2 * (n - 1) / n * msg;      // ring all-reduce, sent per device
  const bool moe = IsMoeLayer(a, layer);
  if (a.parallel == ParallelKind::kTensor || !moe) {
    out.push_back(Collective("tp.allreduce", 2 * ring, 2));
    return out;
  }
  out.push_back(Collective("tp.allreduce", ring, 1));
  const double a2a = rows / n * a.experts_active * a.dim * a.act_bytes * (n - 1) / n;
  out.push_back(Collective("ep.dispatch", a2a, 1));
  out.push_back(Collective("ep.combine", a2a, 1));
  out.push_back(Collective("ep.allgather", (n - 1) / n * msg, 1));
  return out;
}

// ComputeSeconds: the compute side of one layer's operator `c` (OpCost::
// compute_s).
double ComputeSeconds(const ModelArch& a, const HardwareSpec& hw, const OpCost& c) {
  if (c.collectives > 0 || c.flops <= 0) return 0;
  const double peak = PeakFlops(a, hw);
  double rate = peak;
  if (c.gemm_rows > 0) {
    rate = GemmRateAtRows(hw.gemm_flops_at_rows, c.gemm_rows, peak);
  } else if ((c.op == "attn.score" || c.op == "attn.value") && hw.attention_flops > 0) {
    rate = hw.attention_flops;
  }
  return rate > 0 ? c.flops / rate : 0;
}

void Time(const HardwareSpec& hw, OpCost* c) {
  c->intensity = c->bytes > 0 ? c->flops / c->bytes : 0;
  if (c->collectives > 0) {
    const double link = LinkBandwidth(hw);
    c->time_s = (link > 0 ? c->bytes / link : 0) + c->collectives * hw.collective_latency_s;
    c->bound = "link";
    return;
  }
  const double tc = c->compute_s;
  const double tm = hw.mem_bw > 0 ? c->bytes / hw.mem_bw : 0;
  c->time_s = std::max(tc, tm);
  c->bound = tc >= tm ? "compute" : "memory";
}

// Accumulate: adds one layer's operators into the phase, merged by name
// (first appearance order kept), each with its compute seconds at the rate
// for its own rows.
void Accumulate(const ModelArch& a, const HardwareSpec& hw, std::vector<OpCost> layer,
                std::vector<OpCost>* ops) {
  for (OpCost& c : layer) {
    c.compute_s = ComputeSeconds(a, hw, c);
    auto it = std::find_if(ops->begin(), ops->end(), [&](const OpCost& o) { return o.op == c.op; });
    if (it == ops->end()) {
      ops->push_back(std::move(c));
      continue;
    }
    it->flops += c.flops;
    it->bytes += c.bytes;
    it->weight_bytes += c.weight_bytes;
    it->collectives += c.collectives;
    it->compute_s += c.compute_s;
    it->gemm_rows = c.gemm_rows;
  }
}

// Finish: times every operator, marks weight-carrying ones capacity-bound
// when the footprint does not fit, sets shares and the phase bound.
void Finish(const ModelArch& a, const HardwareSpec& hw, Phase* p) {
  p->fits = hw.mem_capacity_bytes <= 0 || p->footprint_bytes <= hw.mem_capacity_bytes;
  double sum = 0, load = 0;
  std::map<std::string, double> by_bound;
  for (OpCost& c : p->ops) {
    const bool is_load = absl::StartsWith(c.op, "kv_load.");  // timed by its phase
    if (!is_load) Time(hw, &c);
    if (!p->fits && c.weight_bytes > 0) c.bound = "capacity";
    sum += c.time_s;
    load += is_load ? c.time_s : 0;
    // Loads overlap compute: their phase decides (BlendPhase, KvLoadPhase).
    if (!is_load) by_bound[c.bound] += c.time_s;
  }
  for (OpCost& c : p->ops) c.share = sum > 0 ? c.time_s / sum : 0;
  double best = -1;
  for (const auto& [bound, t] : by_bound) {
    if (t > best) {
      best = t;
      p->bound = bound;
    }
  }
  p->compute_s = sum - load + hw.layer_overhead_s * a.layers;
}

double SlidingVisible(double lo, double hi, double window) {
  // Sum over positions p in [lo, hi) of min(p + 1, window).
  const double cut = std::clamp(window - 1, lo, hi);  // positions below cut see p + 1 keys
  const double below = (cut * (cut + 1) - lo * (lo + 1)) / 2;
  return below + (hi - cut) * window;
}

LayerLoad PrefillLoad(const ModelArch& a, int layer, double T) {
  LayerLoad x;
  x.rows = x.moe_tokens = x.kv_read_tokens = T;
  x.visible_keys = LayerAttention(a, layer) == AttentionKind::kSliding
                       ? SlidingVisible(0, T, a.sliding_window)
                       : T * (T + 1) / 2;
  return x;
}

void AddHead(const ModelArch& a, const HardwareSpec& hw, double rows, Phase* p) {
  Accumulate(a, hw, {Gemm("lm_head", rows, a.dim, a.vocab, a.weight_bytes, a.act_bytes)},
             &p->ops);
}

// Keys seen by rows at every position of [lo, hi): sum of (p + 1).
double RangeVisible(double lo, double hi) {
  return hi > lo ? (hi * (hi + 1) - lo * (lo + 1)) / 2 : 0;
}

// BlendScheduleOf: MakeSchedule's check layers for `ratio` on `a` (a model
// with sliding-window layers checks first at its first global layer).
std::vector<CheckLayer> BlendScheduleOf(const ModelArch& a, double ratio) {
  BlendOptions bo;
  bo.ratio = ratio;
  return MakeSchedule(bo, a.layers,
                      [&](int l) { return LayerAttention(a, l) == AttentionKind::kSliding; });
}

}  // namespace

double DistinctExperts(double experts, double active, double tokens) {
  if (experts <= 0 || tokens <= 0) return 0;
  return experts * (1 - std::pow(1 - active / experts, tokens));
}

double PeakFlops(const ModelArch& a, const HardwareSpec& hw) {
  if (a.precision == Precision::kFp8 && hw.peak_fp8_flops > 0) return hw.peak_fp8_flops;
  return hw.peak_flops;
}

std::vector<OpCost> LayerOps(const ModelArch& a, int layer, const LayerLoad& load) {
  std::vector<OpCost> out;
  if (LayerAttention(a, layer) == AttentionKind::kLinear) {
    LinearOps(a, load, &out);
  } else if (IsMla(a)) {
    MlaOps(a, load, &out);
  } else {
    GqaOps(a, load, &out);
  }
  FfnOps(a, layer, load, &out);
  for (OpCost& c : CollectiveOps(a, layer, load.rows)) out.push_back(std::move(c));
  return out;
}

Phase PrefillPhase(const ModelArch& a, const HardwareSpec& hw, int64_t tokens,
                   int64_t sequences) {
  Phase p;
  p.name = "prefill";
  const double T = static_cast<double>(tokens), S = static_cast<double>(sequences);
  for (int l = 0; l < a.layers; ++l) {
    LayerLoad x = PrefillLoad(a, l, T);
    x.rows *= S;
    x.moe_tokens *= S;
    x.kv_read_tokens *= S;
    x.visible_keys *= S;
    x.sequences = S;
    Accumulate(a, hw, LayerOps(a, l, x), &p.ops);
  }
  AddHead(a, hw, S, &p);
  p.footprint_bytes = WeightBytes(a) + S * (KvBytes(a, tokens) + RecurrentStateBytes(a));
  Finish(a, hw, &p);
  p.time_s = p.compute_s;
  return p;
}

Phase DecodePhase(const ModelArch& a, const HardwareSpec& hw, int64_t batch,
                  int64_t context_tokens) {
  Phase p;
  p.name = absl::StrFormat("decode b=%d", batch);
  const double B = static_cast<double>(batch), N = static_cast<double>(context_tokens);
  for (int l = 0; l < a.layers; ++l) {
    LayerLoad x;
    x.rows = x.moe_tokens = x.sequences = B;
    const bool sliding = LayerAttention(a, l) == AttentionKind::kSliding;
    const double kept = sliding ? std::min<double>(N, a.sliding_window) : N;
    x.kv_read_tokens = B * kept;
    x.visible_keys = B * (sliding ? std::min<double>(N + 1, a.sliding_window) : N + 1);
    Accumulate(a, hw, LayerOps(a, l, x), &p.ops);
  }
  AddHead(a, hw, B, &p);
  p.footprint_bytes =
      WeightBytes(a) + B * (KvBytes(a, context_tokens + 1) + RecurrentStateBytes(a));
  Finish(a, hw, &p);
  p.time_s = p.compute_s;
  return p;
}

std::vector<BlendLayerRows> BlendRowsByLayer(const ModelArch& a, int64_t context_tokens,
                                             int64_t query_tokens, double ratio,
                                             int64_t exact_prefix_tokens) {
  const double C = static_cast<double>(context_tokens), Q = static_cast<double>(query_tokens);
  const double S = C - static_cast<double>(std::clamp<int64_t>(exact_prefix_tokens, 0,
                                                                context_tokens));
  const std::vector<CheckLayer> schedule = ratio > 0 ? BlendScheduleOf(a, ratio)
                                                     : std::vector<CheckLayer>{};
  std::vector<BlendLayerRows> out;
  for (const LayerRows& r : RowsByLayer(schedule, a.layers, S, ratio > 0)) {
    out.push_back({r.selected + Q, r.probed});
  }
  return out;
}

// AddLookahead: the query look-ahead of the default selector
// (lookahead-deviation, blend/internal/lookahead.h): at the first check
// layer f the Q query rows run once through layers f..L-2 (a forward of Q
// rows over the C + Q keys) and, at each layer after f, project their
// queries and score the C context keys (a Q x heads by C logits GEMM and
// its softmax; act elements read + written: the K plane and the logits).
void AddLookahead(const ModelArch& a, const HardwareSpec& hw, int first, double C, double Q,
                  std::vector<OpCost>* ops) {
  if (Q <= 0) return;
  const double q_dim = static_cast<double>(a.heads) * a.head_dim, ab = a.act_bytes;
  const double kv = static_cast<double>(a.kv_heads) * a.head_dim;
  for (int l = first; l + 1 < a.layers; ++l) {
    LayerLoad x;
    x.rows = x.moe_tokens = Q;
    x.kv_read_tokens = C + Q;
    x.visible_keys = RangeVisible(C, C + Q);
    std::vector<OpCost> layer = LayerOps(a, l, x);
    for (OpCost& c : layer) c.op = "blend.lookahead." + c.op;
    Accumulate(a, hw, std::move(layer), ops);
    Accumulate(a, hw,
               {Gemm("blend.lookahead.q", Q, a.dim, q_dim, a.weight_bytes, ab),
                Cost("blend.lookahead.scores", 2 * Q * q_dim * C,
                     (C * kv + 2 * Q * a.heads * C) * ab)},
               ops);
  }
}

absl::StatusOr<Phase> BlendPhase(const ModelArch& a, const HardwareSpec& hw,
                                 int64_t context_tokens, int64_t query_tokens, double ratio,
                                 Tier tier, int64_t exact_prefix_tokens) {
  if (absl::Status s = CheckChunkReusable(a); !s.ok()) return s;
  Phase p;
  p.name = ratio > 0 ? absl::StrFormat("blend r=%.2f %s", ratio, TierName(tier))
                     : absl::StrFormat("full-reuse %s", TierName(tier));
  const double C = static_cast<double>(context_tokens), Q = static_cast<double>(query_tokens);
  const double E = static_cast<double>(std::clamp<int64_t>(exact_prefix_tokens, 0, context_tokens));
  const double N = C + Q, W = a.sliding_window, ab = a.act_bytes;
  const double kv = static_cast<double>(a.kv_heads) * a.head_dim;
  const std::vector<BlendLayerRows> rows =
      BlendRowsByLayer(a, context_tokens, query_tokens, ratio, exact_prefix_tokens);
  double load_bytes = 0;
  for (int l = 0; l < a.layers; ++l) {
    const bool sliding = LayerAttention(a, l) == AttentionKind::kSliding;
    const double sel = rows[l].rows - Q;
    if (rows[l].probed > 0) {
      // The probe: K/V of every candidate (Model::ProjectKV), then per
      // candidate the gathers of hidden rows and cached K/V, the deviation,
      // the scatter of the fresh K/V and the compaction: act elements read +
      // written 6 dim + 18 kv (norm 2 dim, RoPE 2 kv, K/V copy 4 kv, gathers
      // 2 dim + 4 kv, deviation 4 kv, scatter 4 kv, compaction 2 dim).
      const double cand = rows[l].probed;
      const double kv_out = IsMla(a) ? a.kv_lora_rank + a.qk_rope_dim : 2 * kv;
      Accumulate(a, hw,
                 {Gemm("blend.probe", cand, a.dim, kv_out, a.weight_bytes, ab),
                  Cost("blend.select", 0, cand * (6 * a.dim + 18 * kv) * ab)},
                 &p.ops);
    }
    LayerLoad x;
    x.rows = x.moe_tokens = rows[l].rows;
    if (l == 0 && ratio > 0) {
      // Every selectable row and the query, at positions [E, N).
      x.kv_read_tokens = N;
      x.visible_keys = sliding ? SlidingVisible(E, N, W) : RangeVisible(E, N);
    } else {
      // Selected rows spread over [E, C) (on average at (E + C) / 2); the
      // query rows at [C, N).
      x.kv_read_tokens = sliding ? std::min(N, x.rows * W) : N;
      x.visible_keys = sliding ? sel * std::min((E + C + 1) / 2, W) + Q * std::min(C + (Q + 1) / 2, W)
                               : sel * (E + C + 1) / 2 + RangeVisible(C, N);
    }
    // Exact cached K/V (layer 0's loaded values, a probe's fresh ones):
    // those rows project only Q.
    if (sel > 0 && (l == 0 || rows[l].probed > 0)) x.kv_rows = Q;
    Accumulate(a, hw, LayerOps(a, l, x), &p.ops);
    const double kept = sliding ? std::min(C, rows[l].rows * W) : C;
    load_bytes += KvElemsPerToken(a, l) * kept * a.kv_bytes;
  }
  // From the first check that drops rows (probes), as in the Blender.
  for (int l = 0; l < a.layers; ++l) {
    if (rows[l].probed <= 0) continue;
    AddLookahead(a, hw, l, C, Q, &p.ops);
    break;
  }
  AddHead(a, hw, 1, &p);
  OpCost load;
  load.op = absl::StrFormat("kv_load.%s", TierName(tier));
  load.bytes = load_bytes;
  load.bound = "link";
  const double bw = CostModel(ShapeOfArch(a), hw).TierBandwidth(tier);
  load.time_s = bw > 0 ? load_bytes / bw : 0;
  p.ops.push_back(load);
  p.footprint_bytes = WeightBytes(a) + KvBytes(a, context_tokens + query_tokens);
  Finish(a, hw, &p);
  p.load_s = load.time_s;
  // Layer i+1 loads while layer i computes; layer 0's load is exposed.
  p.time_s = std::max(p.compute_s, p.load_s) + p.load_s / a.layers;
  if (p.load_s > p.compute_s) p.bound = "link";
  return p;
}

Phase KvLoadPhase(const ModelArch& a, const HardwareSpec& hw, int64_t context_tokens) {
  Phase p;
  p.name = "kv-load";
  const double bytes = KvBytes(a, context_tokens);
  const CostModel m(ShapeOfArch(a), hw);
  const std::pair<const char*, double> tiers[] = {{"kv_load.hbm", hw.mem_bw},
                                                  {"kv_load.ram", m.TierBandwidth(Tier::kRam)},
                                                  {"kv_load.ssd", m.TierBandwidth(Tier::kSsd)},
                                                  {"kv_load.redis",
                                                   m.TierBandwidth(Tier::kRemote)}};
  for (const auto& [name, bw] : tiers) {
    OpCost c;
    c.op = name;
    c.bytes = bytes;
    c.time_s = bw > 0 ? bytes / bw : 0;
    c.bound = std::string(name) == "kv_load.hbm" ? "memory" : "link";
    p.ops.push_back(c);
  }
  p.footprint_bytes = bytes;
  Finish(a, hw, &p);
  p.time_s = p.ops[1].time_s;  // the RAM tier's: each row is an alternative
  p.bound = "link";
  return p;
}

}  // namespace ragkv::blend
