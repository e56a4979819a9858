// kv_sink.h: KVSink, the engine-side interface into which the connector
// writes fused KV layer by layer as it arrives from the sidecar, and
// CollectingKVSink, a sink that keeps everything in memory.
//
// An engine implements KVSink to map each layer straight into its paged KV
// cache: OnHeader announces the layout and the fused prompt tokens (allocate
// pages), OnLayer delivers layer i while the sidecar still computes i+1,
// OnSummary ends the stream with statistics. Views passed to OnLayer are
// valid only during the call (copy what you keep).
//
// Thread safety: the connector calls a sink from one thread, in order
// OnHeader, OnLayer(0..L-1), OnSummary. A sink used by one call at a time
// needs no locking.
#ifndef RAGKV_CONNECTOR_KV_SINK_H_
#define RAGKV_CONNECTOR_KV_SINK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ragkv {

// WireDType: KV element type on the wire (ragkv.v1.DType).
enum class WireDType : int { kF32 = 1, kF16 = 2, kBF16 = 3 };
int WireDTypeSize(WireDType t);

// FusedSpan: a segment of the fused prompt: tokens [begin, end).
struct FusedSpan {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint64_t chunk_id = 0;   // valid when is_chunk
  bool cache_hit = false;  // its KV came from the store
  bool is_chunk = false;   // a catalogue chunk (else prefix / fresh / query)
  uint32_t chunk_begin = 0;  // the chunk's first row in the span (raw prompts)
};

// FusedPromptInfo: what OnHeader receives.
struct FusedPromptInfo {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int num_tokens = 0;
  WireDType dtype = WireDType::kF32;
  std::string model_fingerprint;  // raw bytes
  std::vector<int32_t> token_ids;  // the fused prompt, num_tokens ids
  std::vector<FusedSpan> spans;
  std::vector<uint64_t> retrieved_chunk_ids;  // RetrieveAndBlend only
};

// FusedLayerView: one layer, as received. k and v are each
// num_kv_heads * num_tokens * head_dim elements of `dtype`, layout
// [kv_heads][tokens][head_dim], keys after RoPE at their fused positions.
// recomputed_mask: bit t (byte t/8, LSB first) = token t was recomputed.
struct FusedLayerView {
  int layer = 0;
  std::string_view k;
  std::string_view v;
  std::string_view recomputed_mask;
  bool Recomputed(int token) const {
    size_t byte = static_cast<size_t>(token) / 8;
    return byte < recomputed_mask.size() &&
           ((static_cast<uint8_t>(recomputed_mask[byte]) >> (token % 8)) & 1u);
  }
};

// FailedLoadInfo: a cached chunk whose stored KV failed mid-blend (corrupt
// or truncated record, tier outage); the server recomputed it as a miss.
struct FailedLoadInfo {
  uint32_t span = 0;      // index into FusedPromptInfo::spans
  uint64_t chunk_id = 0;
  uint32_t layer = 0;     // the layer whose load failed
  std::string reason;     // the store's error
};

// BlendStats: what OnSummary receives.
struct BlendStats {
  uint32_t recomputed_tokens = 0;
  uint32_t prefix_tokens = 0;     // leading tokens served from stored exact prefix blocks
  float effective_ratio = 0;
  float ratio = 0;                // the CacheBlend ratio applied (0: other modes)
  std::string controller_reason;  // BLEND_MODE_AUTO: the controller's why
  std::string quality_gate;       // the served model's gate (docs/quality_gate.md)
  std::vector<std::pair<std::string, double>> timings_ms;  // stage -> ms
  std::vector<FailedLoadInfo> failed_loads;  // chunks recomputed after a failed load
  double TimingMs(std::string_view stage) const;           // 0 if absent
};

class KVSink {
 public:
  virtual ~KVSink() = default;
  // OnHeader: called once, first. An error aborts the call (the client
  // cancels the stream and returns the error).
  virtual absl::Status OnHeader(const FusedPromptInfo& info) = 0;
  // OnLayer: called for layers 0..L-1 in order; the checksum is already
  // verified (DataLoss from the client otherwise).
  virtual absl::Status OnLayer(const FusedLayerView& layer) = 0;
  // OnRestart: the layers received so far are void (a chunk's stored KV
  // failed mid-blend; the server blends again with it as a miss): layers
  // 0..L-1 follow again, then the summary. A sink that keeps layers must
  // drop them. The default refuses (the call fails with Unimplemented), so
  // a sink never mixes layers of two blends by accident.
  virtual absl::Status OnRestart(const FailedLoadInfo& failed);
  // OnSummary: called once after the last layer.
  virtual absl::Status OnSummary(const BlendStats& stats) { return absl::OkStatus(); }
};

// CollectingKVSink: keeps the header, every layer's bytes and the summary.
class CollectingKVSink : public KVSink {
 public:
  absl::Status OnHeader(const FusedPromptInfo& info) override;
  absl::Status OnLayer(const FusedLayerView& layer) override;
  absl::Status OnRestart(const FailedLoadInfo& failed) override;  // drops the layers
  absl::Status OnSummary(const BlendStats& stats) override;

  FusedPromptInfo info;
  std::vector<std::string> k;     // per layer, raw bytes
  std::vector<std::string> v;     // per layer, raw bytes
  std::vector<std::string> mask;  // per layer
  BlendStats stats;
  bool got_summary = false;
  int restarts = 0;
};

}  // namespace ragkv

#endif  // RAGKV_CONNECTOR_KV_SINK_H_
