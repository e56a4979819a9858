// plan_capacity.h: capacity and break-even planning for a corpus.
//
// Given a corpus (tokens), a request rate and a request shape, how many
// devices, how much HBM, host RAM and SSD a deployment needs with the KV of
// every chunk precomputed, per KV codec (f16 raw, int8, fp8, int4: the
// bytes of the real kvstore record format, header and per-layer prefixes
// included), and the request rate above which precomputing pays for itself:
// device-seconds saved per request (full prefill minus CacheBlend from the
// tier, per blend/plan_ops.h) priced at a device-hour price, against the
// storage bytes (priced per GB-month) and the device time of precomputing
// the corpus once per refresh period. Formulas and the stated prices:
// docs/planner.md "Capacity and break-even". Deterministic; pure computation.
#ifndef RAGKV_BLEND_PLAN_CAPACITY_H_
#define RAGKV_BLEND_PLAN_CAPACITY_H_

#include <string>
#include <vector>

#include "blend/cost_model.h"
#include "blend/plan_advice.h"
#include "blend/plan_arch.h"
#include "kvstore/kv_chunk.h"

namespace ragkv::blend {

struct CorpusWorkload {
  double corpus_tokens = 0;     // tokens of the corpus (0: no capacity plan)
  double requests_per_s = 10;   // sustained request rate
  int64_t chunk_tokens = 512;   // tokens per precomputed chunk record
  int64_t output_tokens = 128;  // decoded per request, at the advice's decode batch
};

// CapacityPrices: the stated prices (docs/planner.md gives their basis; all
// are assumptions the caller should replace with its own).
struct CapacityPrices {
  double device_usd_per_hour = 3.0;  // one accelerator (or CPU server) hour
  double ram_usd_per_gb = 3.0;       // server DRAM, purchase
  double ssd_usd_per_gb = 0.08;      // datacenter NVMe, purchase
  double remote_usd_per_gb = 3.0;    // DRAM on the remote (Redis) nodes, purchase
  double amortize_months = 36;       // storage purchase spread over this many months
  double refresh_days = 30;          // the corpus is re-precomputed this often
};

struct CodecCapacity {
  kvstore::Codec codec = kvstore::Codec::kRaw;
  double record_bytes_per_token = 0;  // one chunk record's bytes / its tokens
  double corpus_bytes = 0;            // every chunk's record
  double blend_s = 0;                 // replica-seconds of one request's blend (TTFT)
  int devices = 0;                    // devices serving the rate with blending
  double storage_usd_per_month = 0;
  double break_even_rps = 0;  // above this rate precomputing pays (inf: never)
};

struct CapacityPlan {
  int devices_per_replica = 1;
  double prefill_s = 0;             // replica-seconds of one request's full prefill (TTFT)
  double decode_s = 0;              // replica-seconds of one request's decode share
  int devices_full_prefill = 0;     // devices serving the rate without precomputed KV
  double hbm_per_device_bytes = 0;  // weights + KV of the decode batch, per device
  double hbm_capacity_bytes = 0;
  double precompute_device_s = 0;     // device-seconds to precompute the corpus once
  Tier tier = Tier::kRam;             // where the corpus KV lives
  std::vector<CodecCapacity> codecs;  // raw (f16), int8, fp8, int4
};

// RecordBytesPerToken: bytes of one chunk-local record of `chunk_tokens`
// tokens (kvstore::KvChunkHeader::UncompressedBytes, f16 source, no zstd)
// over its tokens. Per-head K/V layers as (kv_heads, head_dim); MLA's
// latent as one head of (kv_lora + rope) / 2 per K and V; linear layers
// keep none (not chunk-reusable anyway).
double RecordBytesPerToken(const ModelArch& a, kvstore::Codec codec, int64_t chunk_tokens);

// PlanCapacity: `full` is the whole model, `device` its per-device shard
// (blend/plan_parallel.h ShardArch; equal to `full` on one device) spanning
// `devices_per_replica` devices; blends at w.ratio from `tier`.
CapacityPlan PlanCapacity(const ModelArch& full, const ModelArch& device, int devices_per_replica,
                          const HardwareSpec& hw, const AdviceWorkload& w, Tier tier,
                          const CorpusWorkload& c, const CapacityPrices& p);

// CapacityRecommendations: plain sentences with the numbers of the plan.
std::vector<std::string> CapacityRecommendations(const CapacityPlan& plan, const CorpusWorkload& c,
                                                 const CapacityPrices& p);

// CapacityJson: the plan as one JSON object (no leading comma).
std::string CapacityJson(const CapacityPlan& plan);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLAN_CAPACITY_H_
