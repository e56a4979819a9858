#include "blend/plan_capacity.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "blend/plan_ops.h"

namespace ragkv::blend {
namespace {

constexpr kvstore::Codec kCodecs[] = {kvstore::Codec::kRaw, kvstore::Codec::kInt8PerChannel,
                                      kvstore::Codec::kFp8E4M3PerHead,
                                      kvstore::Codec::kInt4Grouped};
constexpr double kMonthS = 30.4375 * 86400;

// CodecLabel: "f16" for raw (the records hold f16), else the codec's name.
std::string CodecLabel(kvstore::Codec c) {
  return c == kvstore::Codec::kRaw ? "f16" : kvstore::CodecName(c);
}

double UsdPerGb(const CapacityPrices& p, Tier t) {
  switch (t) {
    case Tier::kSsd:
      return p.ssd_usd_per_gb;
    case Tier::kRemote:
      return p.remote_usd_per_gb;
    case Tier::kRam:
      break;
  }
  return p.ram_usd_per_gb;
}

// Replicas: replicas busy `s` replica-seconds per request at `rps`, at least 1.
int Replicas(double rps, double s) { return std::max(1, static_cast<int>(std::ceil(rps * s))); }

double KvElems(const ModelArch& a) {
  double e = 0;
  for (int l = 0; l < a.layers; ++l) e += KvElemsPerToken(a, l);
  return e;
}

std::string Money(double usd) {
  if (usd >= 1e6) return absl::StrFormat("$%.2fM", usd / 1e6);
  if (usd >= 1e3) return absl::StrFormat("$%.1fk", usd / 1e3);
  return absl::StrFormat("$%.2f", usd);
}

std::string Rate(double rps) {
  return std::isfinite(rps) ? absl::StrFormat("%.3g req/s", rps) : std::string("never");
}

}  // namespace

double RecordBytesPerToken(const ModelArch& a, kvstore::Codec codec, int64_t chunk_tokens) {
  kvstore::KvChunkHeader h;
  h.codec = codec;
  h.dtype = kernels::DType::kF16;
  h.num_layers = static_cast<uint32_t>(a.layers - CountLayers(a, AttentionKind::kLinear));
  if (IsMla(a)) {
    h.num_kv_heads = 1;
    h.head_dim = static_cast<uint32_t>((a.kv_lora_rank + a.qk_rope_dim + 1) / 2);
  } else {
    h.num_kv_heads = static_cast<uint32_t>(a.kv_heads);
    h.head_dim = static_cast<uint32_t>(a.head_dim);
  }
  h.tokens.assign(static_cast<size_t>(std::max<int64_t>(1, chunk_tokens)), 0);
  return static_cast<double>(h.UncompressedBytes()) / static_cast<double>(h.tokens.size());
}

CapacityPlan PlanCapacity(const ModelArch& full, const ModelArch& device, int devices_per_replica,
                          const HardwareSpec& hw, const AdviceWorkload& w, Tier tier,
                          const CorpusWorkload& c, const CapacityPrices& p) {
  CapacityPlan plan;
  plan.devices_per_replica = devices_per_replica;
  plan.tier = tier;
  const int64_t n = w.context_tokens + w.query_tokens;
  const double N = devices_per_replica, usd_per_s = p.device_usd_per_hour / 3600;
  plan.prefill_s = PrefillPhase(device, hw, n).time_s;
  const Phase dec = DecodePhase(device, hw, w.decode_batch, n + c.output_tokens / 2);
  plan.decode_s = static_cast<double>(c.output_tokens) * dec.time_s / w.decode_batch;
  plan.hbm_per_device_bytes = dec.footprint_bytes;
  plan.hbm_capacity_bytes = hw.mem_capacity_bytes;
  plan.devices_full_prefill =
      Replicas(c.requests_per_s, plan.prefill_s + plan.decode_s) * devices_per_replica;
  const double chunks = std::ceil(c.corpus_tokens / static_cast<double>(c.chunk_tokens));
  plan.precompute_device_s = chunks * PrefillPhase(device, hw, c.chunk_tokens).time_s * N;
  const double precompute_usd_per_s =
      plan.precompute_device_s * usd_per_s / std::max(1e-9, p.refresh_days * 86400);
  for (kvstore::Codec codec : kCodecs) {
    CodecCapacity k;
    k.codec = codec;
    k.record_bytes_per_token = RecordBytesPerToken(full, codec, c.chunk_tokens);
    k.corpus_bytes = chunks * static_cast<double>(c.chunk_tokens) * k.record_bytes_per_token;
    ModelArch d = device;  // the tier streams this codec's bytes per KV element
    d.kv_bytes = k.record_bytes_per_token / std::max(1.0, KvElems(full));
    absl::StatusOr<Phase> blend =
        BlendPhase(d, hw, w.context_tokens, w.query_tokens, w.ratio, tier,
                   w.exact_prefix_tokens);
    k.blend_s = blend.ok() ? blend->time_s : plan.prefill_s;
    k.devices = Replicas(c.requests_per_s, k.blend_s + plan.decode_s) * devices_per_replica;
    k.storage_usd_per_month =
        k.corpus_bytes / 1e9 * UsdPerGb(p, tier) / std::max(1e-9, p.amortize_months);
    const double saving = (plan.prefill_s - k.blend_s) * N * usd_per_s;  // per request
    const double cost = k.storage_usd_per_month / kMonthS + precompute_usd_per_s;
    k.break_even_rps = saving > 0 ? cost / saving : std::numeric_limits<double>::infinity();
    plan.codecs.push_back(k);
  }
  return plan;
}

std::vector<std::string> CapacityRecommendations(const CapacityPlan& plan, const CorpusWorkload& c,
                                                 const CapacityPrices& p) {
  std::vector<std::string> out, sizes, devices, even;
  for (const CodecCapacity& k : plan.codecs) {
    const std::string name = CodecLabel(k.codec);
    sizes.push_back(absl::StrFormat("%s %.1f KiB/token = %.3g TB", name,
                                    k.record_bytes_per_token / 1024, k.corpus_bytes / 1e12));
    devices.push_back(absl::StrFormat("%s %d (TTFT %.1f ms)", name, k.devices, k.blend_s * 1e3));
    even.push_back(absl::StrFormat("%s above %s (%s/month storage)", name, Rate(k.break_even_rps),
                                   Money(k.storage_usd_per_month)));
  }
  const char* tier = TierName(plan.tier);
  out.push_back(absl::StrFormat(
      "corpus of %.3g tokens precomputed in %d-token chunk records (kvstore format, headers "
      "included): %s; it needs that much %s",
      c.corpus_tokens, c.chunk_tokens, absl::StrJoin(sizes, ", "),
      plan.tier == Tier::kSsd   ? "SSD"
      : plan.tier == Tier::kRam ? "host RAM"
                                : "remote RAM"));
  out.push_back(absl::StrFormat(
      "at %.3g req/s with %d output tokens each: full prefill needs %d devices (TTFT %.1f ms + "
      "decode %.1f ms per request, %d per replica); blending from %s needs %s; memory per device "
      "%.1f GB of %.0f GB (weights + decode-batch KV; HBM or DRAM)",
      c.requests_per_s, c.output_tokens, plan.devices_full_prefill, plan.prefill_s * 1e3,
      plan.decode_s * 1e3, plan.devices_per_replica, tier, absl::StrJoin(devices, ", "),
      plan.hbm_per_device_bytes / 1e9, plan.hbm_capacity_bytes / 1e9));
  out.push_back(absl::StrFormat(
      "precomputing the corpus into %s pays for itself at %s; precompute %.3g device-hours per "
      "refresh (prices stated, not measured: device $%.2f/h, %s $%.2f/GB over %.0f months, "
      "refresh every %.0f days)",
      tier, absl::StrJoin(even, ", "), plan.precompute_device_s / 3600, p.device_usd_per_hour, tier,
      UsdPerGb(p, plan.tier), p.amortize_months, p.refresh_days));
  return out;
}

std::string CapacityJson(const CapacityPlan& plan) {
  std::vector<std::string> codecs;
  for (const CodecCapacity& k : plan.codecs) {
    codecs.push_back(absl::StrFormat(
        R"({"codec":"%s","record_bytes_per_token":%.6g,"corpus_bytes":%.6g,"blend_ms":%.6g,)"
        R"("devices":%d,"storage_usd_per_month":%.6g,"break_even_rps":%s})",
        CodecLabel(k.codec), k.record_bytes_per_token, k.corpus_bytes, k.blend_s * 1e3, k.devices,
        k.storage_usd_per_month,
        std::isfinite(k.break_even_rps) ? absl::StrFormat("%.6g", k.break_even_rps) : "null"));
  }
  return absl::StrFormat(
      R"({"tier":"%s","devices_per_replica":%d,"prefill_ms":%.6g,"decode_ms":%.6g,)"
      R"("devices_full_prefill":%d,"hbm_per_device_bytes":%.6g,"hbm_capacity_bytes":%.6g,)"
      R"("precompute_device_s":%.6g,"codecs":[%s]})",
      TierName(plan.tier), plan.devices_per_replica, plan.prefill_s * 1e3, plan.decode_s * 1e3,
      plan.devices_full_prefill, plan.hbm_per_device_bytes, plan.hbm_capacity_bytes,
      plan.precompute_device_s, absl::StrJoin(codecs, ","));
}

}  // namespace ragkv::blend
