#include "connector/kv_sink.h"

#include "absl/strings/str_format.h"

namespace ragkv {

int WireDTypeSize(WireDType t) {
  switch (t) {
    case WireDType::kF32: return 4;
    case WireDType::kF16: return 2;
    case WireDType::kBF16: return 2;
  }
  return 0;
}

double BlendStats::TimingMs(std::string_view stage) const {
  for (const auto& [name, ms] : timings_ms) {
    if (name == stage) return ms;
  }
  return 0;
}

absl::Status CollectingKVSink::OnHeader(const FusedPromptInfo& in) {
  info = in;
  k.clear();
  v.clear();
  mask.clear();
  return absl::OkStatus();
}

absl::Status CollectingKVSink::OnLayer(const FusedLayerView& layer) {
  if (layer.layer != static_cast<int>(k.size())) {
    return absl::InternalError(absl::StrFormat("sink: layer %d out of order", layer.layer));
  }
  k.emplace_back(layer.k);
  v.emplace_back(layer.v);
  mask.emplace_back(layer.recomputed_mask);
  return absl::OkStatus();
}

absl::Status KVSink::OnRestart(const FailedLoadInfo& failed) {
  return absl::UnimplementedError(absl::StrFormat(
      "the blend restarted (chunk %d failed at layer %d: %s) and this sink cannot drop the "
      "layers it took",
      failed.chunk_id, failed.layer, failed.reason));
}

absl::Status CollectingKVSink::OnRestart(const FailedLoadInfo&) {
  k.clear();
  v.clear();
  mask.clear();
  ++restarts;
  return absl::OkStatus();
}

absl::Status CollectingKVSink::OnSummary(const BlendStats& s) {
  stats = s;
  got_summary = true;
  return absl::OkStatus();
}

}  // namespace ragkv
