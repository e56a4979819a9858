#include "blend/plan_parallel.h"

#include "absl/strings/str_format.h"

namespace ragkv::blend {
namespace {

int CeilDiv(int x, int n) { return (x + n - 1) / n; }

}  // namespace

absl::StatusOr<ParallelKind> ParseParallel(std::string_view name) {
  if (name == "none") return ParallelKind::kNone;
  if (name == "tp") return ParallelKind::kTensor;
  if (name == "ep") return ParallelKind::kExpert;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown parallelism '%s' (none, tp, ep)", name));
}

const char* ParallelName(ParallelKind kind) {
  switch (kind) {
    case ParallelKind::kTensor:
      return "tp";
    case ParallelKind::kExpert:
      return "ep";
    case ParallelKind::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<ModelArch> ShardArch(const ModelArch& a, int devices, ParallelKind kind) {
  if (devices < 1) return absl::InvalidArgumentError("parallel: --devices must be >= 1");
  if (devices == 1 || kind == ParallelKind::kNone) return a;
  if (a.heads % devices != 0 || (a.linear_v_heads > 0 && a.linear_v_heads % devices != 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d query heads (%d linear value heads) do not split over %d devices",
                        a.name, a.heads, a.linear_v_heads, devices));
  }
  if (kind == ParallelKind::kExpert && a.experts == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s has no routed experts: expert parallelism needs a MoE model (use --parallel tp)",
        a.name));
  }
  ModelArch s = a;
  s.parallel_devices = devices;
  s.parallel = kind;
  s.heads = a.heads / devices;
  s.kv_heads = CeilDiv(a.kv_heads, devices);  // replicated when fewer than the devices
  s.ffn = CeilDiv(a.ffn, devices);
  s.vocab = CeilDiv(a.vocab, devices);
  s.linear_k_heads = CeilDiv(a.linear_k_heads, devices);
  s.linear_v_heads = a.linear_v_heads / devices;
  if (kind == ParallelKind::kTensor) {
    s.expert_ffn = CeilDiv(a.expert_ffn, devices);
    s.shared_expert_ffn = CeilDiv(a.shared_expert_ffn, devices);
  } else {
    s.expert_parallel = devices;  // shared experts replicated, routed ones spread
  }
  return s;
}

double LinkBandwidth(const HardwareSpec& hw) {
  return hw.device_link_bw > 0 ? hw.device_link_bw : hw.ram_tier_bw;
}

}  // namespace ragkv::blend
