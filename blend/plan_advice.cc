#include "blend/plan_advice.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_format.h"
#include "blend/plan_parallel.h"

namespace ragkv::blend {
namespace {

using PhaseFn = std::function<double(const ModelArch&, const HardwareSpec&)>;

// Change: relative change of a phase's time when `arch`/`hw` change, in %.
double Change(const PhaseFn& f, const ModelArch& a, const HardwareSpec& hw, const ModelArch& a2,
              const HardwareSpec& hw2) {
  const double base = f(a, hw);
  return base > 0 ? (f(a2, hw2) / base - 1) * 100 : 0;
}

HardwareSpec MoreBandwidth(HardwareSpec hw) {
  hw.mem_bw *= 1.5;
  return hw;
}

HardwareSpec MoreFlops(HardwareSpec hw) {
  hw.peak_flops *= 2;
  hw.peak_fp8_flops *= 2;
  return hw;
}

HardwareSpec MoreTier(HardwareSpec hw, Tier t) {
  double* bw[] = {&hw.ram_tier_bw, &hw.ssd_tier_bw, &hw.remote_tier_bw};
  *bw[static_cast<int>(t)] *= 2;
  return hw;
}

// TopOp: "<op> <share>%" of the operator holding the largest share.
std::string TopOp(const Phase& p) {
  auto it = std::max_element(p.ops.begin(), p.ops.end(), [](const OpCost& x, const OpCost& y) {
    return x.share < y.share;
  });
  return it == p.ops.end() ? "-" : absl::StrFormat("%s %.0f%%", it->op, it->share * 100);
}

std::string Capacity(const ModelArch& a, const HardwareSpec& hw, const Phase& decode) {
  const double cap = hw.mem_capacity_bytes;
  const int devices =
      static_cast<int>(std::ceil(decode.footprint_bytes / cap)) * a.parallel_devices;
  return absl::StrFormat(
      "%sweights %.1f GB + KV %.1f GB (decode batch) exceed %s's %.0f GB: at least %d devices "
      "for capacity alone (try --devices %d --parallel %s)",
      a.parallel_devices > 1 ? "per device: " : "", WeightBytes(a) / 1e9,
      (decode.footprint_bytes - WeightBytes(a)) / 1e9, hw.name, cap / 1e9, devices, devices,
      a.experts > 0 ? "ep" : "tp");
}

// Parallel: the collectives' share of prefill and decode on one device of
// the replica, and what 2x link bandwidth buys.
std::string Parallel(const ModelArch& a, const HardwareSpec& hw, const Phase& pre,
                     const Phase& dec, const std::function<double(const HardwareSpec&)>& tpot) {
  auto link_ms = [](const Phase& p) {
    double t = 0;
    for (const OpCost& c : p.ops) t += c.collectives > 0 ? c.time_s : 0;
    return t * 1e3;
  };
  double calls = 0;  // collective calls per decode step
  for (const OpCost& c : dec.ops) calls += c.collectives;
  HardwareSpec fast = hw;
  fast.device_link_bw = LinkBandwidth(hw) * 2;
  const double base = tpot(hw);
  return absl::StrFormat(
      "%s over %d devices (link %.0f GB/s, %.0f us per collective): collectives take %.2f ms "
      "(%.0f%%) of prefill and %.3f ms (%.0f%%) of decode per output token, %.3f ms of it the "
      "latency of %.0f calls; 2x link bandwidth gives %+.0f%% time per output token; per "
      "device %.1f GB of weights",
      ParallelName(a.parallel), a.parallel_devices, LinkBandwidth(hw) / 1e9,
      hw.collective_latency_s * 1e6, link_ms(pre),
      pre.time_s > 0 ? link_ms(pre) / 1e3 / pre.time_s * 100 : 0.0, link_ms(dec),
      dec.time_s > 0 ? link_ms(dec) / 1e3 / dec.time_s * 100 : 0.0,
      calls * hw.collective_latency_s * 1e3, calls,
      base > 0 ? (tpot(fast) / base - 1) * 100 : 0.0, WeightBytes(a) / 1e9);
}

std::string Experts(const ModelArch& a, const AdviceWorkload& w, const Phase& decode) {
  double expert_bytes = 0, all = 0;
  for (const OpCost& c : decode.ops) {
    all += c.bytes;
    if (c.op == "moe.experts") expert_bytes = c.bytes;
  }
  ModelArch active = a;  // the weights one token reads: k experts per MoE layer
  active.experts = a.experts_active;
  return absl::StrFormat(
      "decode at batch %d touches %.1f of %d experts per MoE layer (E(1-(1-k/E)^B), k=%d); "
      "routed expert weights are %.0f%% of the step's bytes; one token reads %.1f GB of the "
      "%.1f GB of weights",
      w.decode_batch, DistinctExperts(a.experts, a.experts_active, w.decode_batch), a.experts,
      a.experts_active, all > 0 ? expert_bytes / all * 100 : 0.0, WeightBytes(active) / 1e9,
      WeightBytes(a) / 1e9);
}

void BlendAdvice(const ModelArch& a, const HardwareSpec& hw, const AdviceWorkload& w,
                 double prefill_s, std::vector<std::string>* out) {
  const PhaseFn blend = [&](const ModelArch& x, const HardwareSpec& h) {
    absl::StatusOr<Phase> p = BlendPhase(x, h, w.context_tokens, w.query_tokens, w.ratio, w.tier,
                                         w.exact_prefix_tokens);
    return p.ok() ? p->time_s : 0.0;
  };
  absl::StatusOr<Phase> p = BlendPhase(a, hw, w.context_tokens, w.query_tokens, w.ratio, w.tier,
                                       w.exact_prefix_tokens);
  if (!p.ok()) {
    out->push_back(std::string(p.status().message()));
    return;
  }
  ModelArch int4 = a;
  int4.kv_bytes = 0.5;
  out->push_back(absl::StrFormat(
      "%s is %s-bound (%s): 2x %s bandwidth gives %+.0f%% TTFT; int4 KV (0.5 B/element) gives "
      "%+.0f%%; 2x FLOPs gives %+.0f%%; %.2f ms vs %.2f ms full prefill (%.1fx)",
      p->name, p->bound, TopOp(*p), TierName(w.tier),
      Change(blend, a, hw, a, MoreTier(hw, w.tier)), Change(blend, a, hw, int4, hw),
      Change(blend, a, hw, a, MoreFlops(hw)), p->time_s * 1e3, prefill_s * 1e3,
      p->time_s > 0 ? prefill_s / p->time_s : 0.0));
}

}  // namespace

std::vector<Phase> AnalysedPhases(const ModelArch& a, const HardwareSpec& hw,
                                  const AdviceWorkload& w) {
  const int64_t n = w.context_tokens + w.query_tokens;
  std::vector<Phase> out = {PrefillPhase(a, hw, n), DecodePhase(a, hw, w.decode_batch, n)};
  for (double r : {w.ratio, 0.0}) {
    absl::StatusOr<Phase> p = BlendPhase(a, hw, w.context_tokens, w.query_tokens, r, w.tier,
                                         w.exact_prefix_tokens);
    if (p.ok()) out.push_back(*p);
  }
  out.push_back(KvLoadPhase(a, hw, w.context_tokens));
  return out;
}

std::vector<std::string> Recommendations(const ModelArch& a, const HardwareSpec& hw,
                                         const AdviceWorkload& w) {
  const int64_t n = w.context_tokens + w.query_tokens;
  const PhaseFn prefill = [n](const ModelArch& x, const HardwareSpec& h) {
    return PrefillPhase(x, h, n).time_s;
  };
  const PhaseFn decode = [&](const ModelArch& x, const HardwareSpec& h) {
    return DecodePhase(x, h, w.decode_batch, n).time_s;
  };
  std::vector<std::string> out;
  const Phase pre = PrefillPhase(a, hw, n), dec = DecodePhase(a, hw, w.decode_batch, n);
  if (!dec.fits) out.push_back(Capacity(a, hw, dec));
  out.push_back(absl::StrFormat(
      "prefill of %d tokens is %s-bound (%s): 2x FLOPs gives %+.0f%% TTFT; +50%% bandwidth gives "
      "%+.0f%%",
      n, pre.bound, TopOp(pre), Change(prefill, a, hw, a, MoreFlops(hw)),
      Change(prefill, a, hw, a, MoreBandwidth(hw))));
  out.push_back(absl::StrFormat(
      "decode at batch %d is %s-bound (%s), %.2f ms per output token, %.0f tokens/s: +50%% "
      "bandwidth gives %+.0f%% time per output token; 2x FLOPs gives %+.0f%%",
      w.decode_batch, dec.bound, TopOp(dec), dec.time_s * 1e3,
      dec.time_s > 0 ? w.decode_batch / dec.time_s : 0.0,
      Change(decode, a, hw, a, MoreBandwidth(hw)), Change(decode, a, hw, a, MoreFlops(hw))));
  if (a.parallel_devices > 1) {
    out.push_back(Parallel(a, hw, pre, dec, [&](const HardwareSpec& h) { return decode(a, h); }));
  }
  if (a.experts > 0) out.push_back(Experts(a, w, dec));
  BlendAdvice(a, hw, w, pre.time_s, &out);
  return out;
}

}  // namespace ragkv::blend
