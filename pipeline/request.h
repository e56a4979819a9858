// request.h: the vocabulary of one request through the pipeline
// (pipeline/pipeline.h): the prompt (segments, or raw token ids in which
// stored chunks are found), the options, what the layer sink receives and
// what the request reports. Protocol-free: the gRPC BlendService, the TTFT
// benchmark and any other front end translate their own shapes to these.
#ifndef RAGKV_PIPELINE_REQUEST_H_
#define RAGKV_PIPELINE_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "blend/blender.h"
#include "model/kv_cache.h"

namespace ragkv::pipeline {

// kMaxSegments: the most segments one prompt may have (and, for a raw
// prompt, twice the most chunk matches).
inline constexpr int kMaxSegments = 4096;

// Segment: one piece of a prompt, in prompt order.
struct Segment {
  enum class Source { kChunkId, kTokens, kText };
  Source source = Source::kTokens;
  uint64_t chunk_id = 0;        // kChunkId: a catalogue chunk; its stored KV is served
  std::vector<int32_t> tokens;  // kTokens
  std::string text;             // kText: tokenized without BOS / EOS
  // document: a kTokens / kText segment that is a document: its stored KV
  // (found by content, kvstore::ChunkKey of its tokens) is served like a
  // catalogue chunk's, and a miss is stored back after the request.
  bool document = false;
};

// Prompt: segments (the last one is the query: tokens or text), or raw
// token ids in which the catalogue's chunks are found by token matching
// (never inside the last `raw_query_tokens`, at least 1).
//
// passages (raw prompts only): rows [begin, end) of `raw` that the caller
// found to be passages (the HTTP server: paragraphs of pasted text). Where
// no catalogue chunk overlaps one, it is served as a document: its stored
// KV found by content (the same passage at any offset, in any order), a
// miss stored back after the request ("learning from traffic"). Sorted,
// disjoint, before the query tail; at most kMaxSegments / 2.
struct Prompt {
  std::vector<Segment> segments;
  std::vector<int32_t> raw;  // used when `segments` is empty
  size_t raw_query_tokens = 1;
  std::vector<std::pair<uint32_t, uint32_t>> passages;
};

// Mode: how the prompt's KV is made.
enum class Mode {
  kCacheBlend,   // reuse stored chunks, recompute a share of rows (ratio)
  kFullPrefill,  // compute everything (the baseline)
  kPrefixReuse,  // reuse only an exact prefix (first chunk at position 0)
  kFullReuse,    // reuse every stored chunk as is
  kAuto,         // the loading controller picks the ratio by tier
};

struct RequestOptions {
  Mode mode = Mode::kCacheBlend;
  // ratio: kCacheBlend's share of rows recomputed; 0 leaves it to the
  // server (the quality gate's ratio, else Pipeline::Options::default_ratio).
  double ratio = 0;
  // selector: kCacheBlend's row ranking; unset leaves it to the server (the
  // quality gate's selector, else blend::BlendOptions' default).
  std::optional<blend::Selector> selector;
  // chunk_head_tokens: kCacheBlend also recomputes each cached chunk's first
  // rows (blend::BlendOptions::chunk_head_tokens); 0: none.
  int chunk_head_tokens = 0;
  // lookahead_layers: the look-ahead's horizon under lookahead-deviation
  // (blend::BlendOptions::lookahead_layers; 0: every layer). kAuto: the
  // loading controller's instead.
  int lookahead_layers = 0;
  // adaptive_mass: kCacheBlend chooses the request's ratio, at most the
  // ratio above (blend::BlendOptions::adaptive_mass); 0: a fixed ratio.
  double adaptive_mass = 0;
  // adaptive_threshold: the threshold rule instead (blend::BlendOptions::
  // adaptive_threshold; overrides adaptive_mass); 0: off.
  double adaptive_threshold = 0;
  // adaptive_budget: the budget rule instead (overrides both above): the
  // threshold is set over the recent requests of the same budget so that
  // their mean ratio is `adaptive_budget` (blend::RecomputeBudget); the
  // ratio above is the cap, min(1, 3 x budget) when 0 (the quality gate's
  // ratio does not replace it). 0: off.
  double adaptive_budget = 0;
  bool add_bos = false;  // put the tokenizer's BOS in front
  // pinned: the quality gate leaves mode, ratio and selector as asked
  // (benchmarks measuring a strategy); the gate's reason is still reported.
  bool pinned = false;
  // accept_restart: the sink voids the layers it received on OnRestart;
  // without it a failed load after the first layer fails the request.
  bool accept_restart = false;
  // retrieve_ms: time the caller spent retrieving (Pipeline::Retrieve),
  // reported in the result's stage times and counted in the total.
  double retrieve_ms = 0;
  // cache_salt: the tenant's key namespace (kvstore::SaltedFingerprint):
  // documents, passages and exact-prefix blocks are found and stored under
  // it only; catalogue chunks are shared. "" = no salt. At most
  // kMaxSaltBytes.
  std::string cache_salt;
  // not_found_when_cold: when nothing of the prompt is stored (no chunk,
  // document, passage or exact-prefix hit), Run schedules the misses'
  // store-back and returns NOT_FOUND before the sink sees anything: an
  // engine prefills such a prompt faster itself.
  bool not_found_when_cold = false;
};
inline constexpr size_t kMaxSaltBytes = 1024;

// Span: one segment of the prompt as served (the optional BOS + leading
// fresh segments form one span; a cut raw chunk keeps its catalogue id).
struct Span {
  uint32_t begin = 0, end = 0;  // token rows [begin, end)
  uint64_t chunk_id = 0;        // catalogue chunks only
  bool is_chunk = false;        // a catalogue chunk or a document
  uint32_t chunk_begin = 0;     // the chunk's first row in this span (raw prompts)
  bool cache_hit = false;       // its stored KV was found
};

// PromptInfo: the whole prompt, before any layer.
struct PromptInfo {
  std::vector<int32_t> tokens;
  std::vector<Span> spans;
};

// FailedLoad: a stored record that failed mid-blend (recomputed as a miss).
struct FailedLoad {
  uint32_t layer = 0;
  std::string reason;
  uint32_t span = 0;      // its span (0 with chunk_id 0: the stored exact prefix)
  uint64_t chunk_id = 0;
};

// LayerSink: where the fused KV goes, layer by layer, in order.
class LayerSink {
 public:
  virtual ~LayerSink() = default;
  // OnPrompt: the prompt's tokens and spans, before the first layer.
  virtual absl::Status OnPrompt(const PromptInfo& prompt) = 0;
  // OnLayer: layer `layer` of `cache` (rows [0, prompt tokens)) is final;
  // `recomputed`: the rows recomputed in it. The cache is only valid
  // during the call. An error stops the request with it.
  virtual absl::Status OnLayer(int layer, const model::KVCache& cache,
                               absl::Span<const int32_t> recomputed) = 0;
  // OnRestart: a load failed after layers were delivered (only with
  // accept_restart): they are void, layer 0 comes again.
  virtual absl::Status OnRestart(const FailedLoad& failed) = 0;
};

// StageMs: where the request's time went.
struct StageMs {
  double retrieve = 0;   // retrieval (Pipeline::Retrieve), as the caller reports it
  double fetch = 0;      // opening stored records + loading layers
  double blend = 0;      // the blend, loads included
  double recompute = 0;  // layer 0 + recomputed rows
  double total = 0;      // everything, retrieval included
};

// RequestResult: what one request did.
struct RequestResult {
  blend::Strategy strategy = blend::Strategy::kCacheBlend;  // as run
  double ratio = 0;          // the CacheBlend ratio run (0 otherwise)
  int64_t tokens = 0;        // prompt tokens
  double mean_recomputed = 0;  // rows recomputed per layer, layers >= 1
  int64_t recomputed_rows = 0;  // rows recomputed, all layers
  int64_t prefix_tokens = 0;    // rows served from the stored exact prefix
  std::string controller_reason;  // kAuto / no controller
  std::string gate_reason;        // the quality gate's ("" without one)
  std::vector<FailedLoad> failed;
  StageMs ms;
  blend::StageTimings timings;  // the Blender's
  uint64_t kv_bytes_read = 0;   // stored KV read
  std::vector<size_t> tiers;    // per stored chunk read: the tier index that served it
  // Options::neighbour_records > 0: catalogue chunks served from their
  // neighbour-aware record, and those that fell back to the plain one (no
  // such record, or no neighbour found).
  int neighbour_records = 0;
  int neighbour_fallbacks = 0;
  // Options::first_position_records: 1 when the first chunk was served from
  // its first-position record (its rows exact), else 0 (also when one was
  // found but the strategy did not read it).
  int first_position_records = 0;
};

}  // namespace ragkv::pipeline

#endif  // RAGKV_PIPELINE_REQUEST_H_
