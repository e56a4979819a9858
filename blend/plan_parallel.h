// plan_parallel.h: tensor and expert parallelism for the planner.
//
// ShardArch turns a model into the architecture one device of an N-device
// replica runs; the phases of blend/plan_ops.h then count that device's
// FLOPs and bytes and add the collectives its layers need (LayerOps,
// blend/plan_ops.h: "tp.allreduce", "ep.dispatch", "ep.combine",
// "ep.allgather"; bytes = bytes sent per device):
//  - tensor parallel (tp): query heads, KV heads (replicated when fewer than
//    N), FFN and expert widths, linear-attention heads and the vocabulary
//    split N ways; MLA's latent is not per head, so its cache and down
//    projections stay whole on every device. Two all-reduces per layer
//    (after the attention output and after the FFN / MoE) of rows x dim
//    activations, ring: 2(N-1)/N of the message sent per device.
//  - expert parallel (ep): attention, dense FFNs and the vocabulary as tp;
//    routed experts spread over the devices (experts / N each, the
//    token-expert pairs routed to them); shared experts replicated. Per
//    layer one all-reduce after attention; per MoE layer an all-to-all
//    dispatch and combine of the device's rows / N tokens x k copies of dim
//    activations ((N-1)/N leave the device) and an all-gather of the
//    combined rows ((N-1)/N x rows x dim received); dense layers also
//    all-reduce after the FFN.
// A collective's time is bytes / device link bandwidth (per direction) +
// a fixed latency per call (HardwareSpec::collective_latency_s); it does not
// overlap compute. Formulas and what they ignore: docs/planner.md.
// Pure computation; thread-compatible.
#ifndef RAGKV_BLEND_PLAN_PARALLEL_H_
#define RAGKV_BLEND_PLAN_PARALLEL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "blend/cost_model.h"
#include "blend/plan_arch.h"

namespace ragkv::blend {

// ParseParallel: "none" | "tp" | "ep"; InvalidArgument naming the choices.
absl::StatusOr<ParallelKind> ParseParallel(std::string_view name);
const char* ParallelName(ParallelKind kind);

// ShardArch: the per-device architecture of `a` over `devices` devices.
// devices == 1 or kNone: `a` unchanged. InvalidArgument when devices < 1,
// when the query heads (or linear-attention value heads) do not divide by
// `devices`, or for ep on a model without routed experts.
absl::StatusOr<ModelArch> ShardArch(const ModelArch& a, int devices, ParallelKind kind);

// LinkBandwidth: the device link per direction, or the host link (PCIe) for a
// device without one (device_link_bw == 0).
double LinkBandwidth(const HardwareSpec& hw);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLAN_PARALLEL_H_
