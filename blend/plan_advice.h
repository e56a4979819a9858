// plan_advice.h: the planner's what-if recommendations.
//
// Each recommendation is one plain sentence with its number, computed by
// re-running a phase of blend/plan_ops.h on a hardware spec with one ceiling
// changed (+50% memory bandwidth, 2x FLOPs, 2x tier bandwidth) or the KV
// stored at 4 bits, e.g. "decode at batch 8 is memory-bound; +50% bandwidth
// gives -33% time per output token; 2x FLOPs gives -0%". Deterministic: the
// same inputs give the same sentences in the same order. Pure computation.
#ifndef RAGKV_BLEND_PLAN_ADVICE_H_
#define RAGKV_BLEND_PLAN_ADVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "blend/cost_model.h"
#include "blend/plan_arch.h"
#include "blend/plan_ops.h"

namespace ragkv::blend {

struct AdviceWorkload {
  int64_t context_tokens = 3072;  // cached chunk tokens of one request
  int64_t query_tokens = 32;
  // exact_prefix_tokens: leading cached tokens at their precomputed offset
  // (the first chunk): never recomputed by the blend (BlendPhase).
  int64_t exact_prefix_tokens = 0;
  int64_t decode_batch = 8;
  double ratio = 0.15;            // CacheBlend ratio of the blend phase
  Tier tier = Tier::kRam;         // tier the blend loads from
};

// AnalysedPhases: prefill of context + query, decode at the batch (context +
// query tokens each), CacheBlend at the ratio and full reuse from the tier
// (omitted when the model is not chunk-reusable), and the KV load per tier.
std::vector<Phase> AnalysedPhases(const ModelArch& a, const HardwareSpec& hw,
                                  const AdviceWorkload& w);

// Recommendations: the what-if sentences for this workload on this device.
std::vector<std::string> Recommendations(const ModelArch& a, const HardwareSpec& hw,
                                         const AdviceWorkload& w);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLAN_ADVICE_H_
