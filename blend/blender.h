// blender.h: Blender, the CacheBlend fuser (docs/design.md §4).
//
// Fuses independently precomputed chunk KVs into one prompt cache:
//   1. concatenate the segments (optional system prefix, chunks, query) and
//      load each cached chunk's KV into the fused cache, re-rotating its keys
//      from chunk-local positions to its global offset;
//   2. layer 0: recompute every non-exact row (the rows' hidden states start
//      flowing; layer-0 KV itself never deviates);
//   3. at each check layer of the schedule, probe the currently selected
//      cached rows (Model::ProjectKV), rank them by KV deviation against the
//      cached, re-rotated K/V, and keep the top fraction (gradual filtering:
//      r1 > r at the first check layer, shrinking to r);
//   4. every later layer recomputes only the selected rows (Model::
//      ForwardLayer over those rows); their fresh K/V is scattered into the
//      fused cache, every other row keeps its cached K/V and its hidden state
//      is not carried further;
//   5. exact causal masking: a row at position i sees keys 0..i.
// Query rows and rows of missed chunks (no cached KV) are always recomputed.
// The first segment, when cached, sits at its original offset 0 and so its
// cached KV is already exact: its rows are never recomputed.
//
// Baselines in the same API (BlendOptions::strategy): full prefill, full KV
// reuse (r = 0: only query and missed rows), prefix-only reuse (first cached
// segment reused, everything after it prefilled).
//
// Ratio semantics: `ratio` is the fraction of the *selectable* rows (rows of
// cached segments other than an exact first segment) recomputed after the
// last check layer; the count is round(ratio * selectable). Forced rows come
// on top.
//
// Thread safety: Blender is immutable after Create (but for its pool of
// compute scratch, behind a mutex); Blend is const and may run concurrently
// from several threads (each call has its own workspace and output),
// provided no KvSource is shared between concurrent calls.
#ifndef RAGKV_BLEND_BLENDER_H_
#define RAGKV_BLEND_BLENDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/free_list.h"
#include "blend/kv_source.h"
#include "blend/recompute_budget.h"
#include "kernels/attention.h"
#include "model/kv_cache.h"
#include "model/kv_cache_pool.h"
#include "model/model.h"

namespace ragkv::blend {

enum class SegmentKind { kPrefix = 0, kChunk = 1, kQuery = 2 };

// FailedLoad: which segment's KvSource failed a Blend, at which layer. The
// error Blend returns for a failed ReadLayer (any code but Cancelled)
// carries it; FailedLoadOf reads it back (nullopt for every other error).
struct FailedLoad {
  int segment = -1;
  int layer = -1;
};
std::optional<FailedLoad> FailedLoadOf(const absl::Status& status);

// BlendSegment: one piece of the prompt, in order. `tokens` and `kv` are not
// owned and must outlive the Blend call. kv == nullptr is a miss (computed
// fresh, always recomputed); the query never has a cache.
struct BlendSegment {
  SegmentKind kind = SegmentKind::kChunk;
  absl::Span<const int32_t> tokens;
  KvSource* kv = nullptr;
};

enum class Strategy {
  kCacheBlend = 0,    // selective recompute (the default)
  kFullPrefill = 1,   // every row in every layer: the quality reference
  kFullReuse = 2,     // cached KV as is (re-rotated); only query/missed rows computed
  kPrefixReuse = 3,   // the first cached segment reused; all later rows prefilled
};
const char* StrategyName(Strategy s);

enum class Deviation {
  kKey = 0,    // sum of squared differences of K (re-rotated)
  kValue = 1,  // of V (what the public implementations use)
  kBoth = 2,   // K and V, each normalized by its mean over the candidates, summed (default)
};

// Selector: how a check layer ranks the candidate rows (docs/blend.md,
// "Recompute selectors"; chosen from `ragkv bench quality --selectors`).
enum class Selector {
  kDeviation = 0,           // CacheBlend: KV deviation of a probe (`deviation`)
  kChunkHead = 1,           // EPIC: the first rows of every chunk (no probe)
  kQueryAttention = 2,      // attention mass from the query rows (cached K; no probe)
  kDeviationAttention = 3,  // both, each mean-normalized, summed (without query
                            // rows in the blend: deviation alone)
  kAttendedDeviation = 4,   // deviation x the query's attention mass on the row: the
                            // first-order change of the query's attention output
                            // (default; without query rows: deviation alone)
  kLookaheadDeviation = 5,  // deviation x the query's attention on the row in the
                            // layers after the check (the query rows run ahead once
                            // over the fused cache; internal/lookahead.h)
};
const char* SelectorName(Selector s);
// ParseSelector: a SelectorName back to the enum; false for an unknown name.
bool ParseSelector(const std::string& name, Selector* out);

// CheckLayer: at the start of layer `layer`, keep round(ratio * selectable)
// of the selectable rows (ranked among those still selected).
struct CheckLayer {
  int layer = 1;
  double ratio = 0;
};

enum class Filtering {
  kGradual = 0,      // check layers first_check_layer .. +gradual_steps-1 (default)
  kSingleCheck = 1,  // one check layer (the public implementations: layer 1)
};

enum class QueryLogits {
  kNone = 0,
  kLast = 1,  // logits of the last query row: [1, vocab]
  kAll = 2,   // logits of every query row: [query_tokens, vocab]
};

// kDevAdaptiveMass: the adaptive_mass chosen on the dev split (docs/blend.md
// "Adaptive ratio"): the largest mass whose mean ratio stayed <= 0.10 on
// both dev workloads.
inline constexpr double kDevAdaptiveMass = 0.95;
// kDevAdaptiveThreshold: the adaptive_threshold chosen on the dev split
// (docs/blend.md "Adaptive ratio", the threshold rule): the smallest of the
// dev grid whose mean ratio stayed <= 0.10 on all three dev workloads.
inline constexpr double kDevAdaptiveThreshold = 1.6e-4;

// kMaxLookaheadLayers: the largest look-ahead horizon a request may ask for
// (proto BlendOptions.lookahead_layers; past the model's last layer it is
// every layer).
inline constexpr int kMaxLookaheadLayers = 1024;

struct BlendOptions {
  Strategy strategy = Strategy::kCacheBlend;
  // Final recompute ratio r in [0, 1] (kCacheBlend). r = 0 is full reuse.
  double ratio = 0.15;
  // Schedule of check layers. Empty: derived from `filtering` by MakeSchedule.
  std::vector<CheckLayer> schedule;
  Filtering filtering = Filtering::kGradual;
  // The first check layer; -1: layer 1 (layer 0 is never informative, see
  // docs/blend.md), or on a model with sliding-window layers the first
  // global layer (docs/gemma3.md section 4, rule 4).
  int first_check_layer = -1;
  // Check layers of kGradual: 4 since 2026-12-06 (2 before), chosen on the
  // dev split (docs/blend.md "Check-layer schedule").
  int gradual_steps = 4;
  double gradual_first_factor = 2.0;  // r1 = min(1, factor * r), geometric down to r
  Deviation deviation = Deviation::kBoth;
  Selector selector = Selector::kLookaheadDeviation;
  // lookahead-deviation: how many layers past each check the query's
  // look-ahead runs before the check ranks (0: every layer to the last).
  // A check waits only for the layers it looks at (docs/blend.md "The
  // look-ahead's horizon"); the loading controller keeps its own value or,
  // where the wait would show, blends with attended-deviation instead. The
  // wire accepts at most kMaxLookaheadLayers.
  int lookahead_layers = 0;
  // Adaptive ratio (adaptive_mass > 0; kCacheBlend, any selector): at the
  // first check layer the final ratio becomes the smallest share of the
  // selectable rows that, taken in the selector's order, cover
  // `adaptive_mass` of the candidates' total estimated error (KV deviation x
  // the attention the query rows put on the row; the deviation alone when
  // the blend has no query rows), clamped to [adaptive_min, `ratio`]. The
  // unit is the same for every selector: the share of the first-order
  // error of what the query reads that recompute removes. Each check
  // layer's ratio of the schedule made for `ratio` is scaled by the choice
  // / `ratio` (capped at 1). BlendResult::applied_ratio says what was chosen.
  // kDevAdaptiveMass (above) is the mass chosen on the dev split.
  double adaptive_mass = 0;
  // Adaptive ratio by threshold (adaptive_threshold = t > 0; overrides
  // adaptive_mass): the final ratio is the share of the selectable rows
  // whose absolute estimated error e_i >= t x sqrt(sum of e), clamped as
  // above, where e_i = the query's mean attention probability on the row
  // (attention mass / (query rows x heads)) x its squared K and V error
  // relative to the cached rows' mean squared norm (internal::
  // RelativeDeviation). A request whose rows deviate more gets more rows
  // (docs/blend.md "Adaptive ratio": the threshold rule, 2026-12-07).
  double adaptive_threshold = 0;
  // Adaptive ratio by budget (recompute_budget set; overrides both above):
  // the threshold rule's errors, with the threshold that `recompute_budget`
  // sets over its recent requests so that their mean ratio stays within its
  // budget, a ceiling (blend/recompute_budget.h). Not owned; outlives the
  // blend.
  RecomputeBudget* recompute_budget = nullptr;
  // The adaptive ratio's floor: at most `ratio`, and at most the budget
  // under recompute_budget (a higher floor would break its ceiling); both
  // refused with InvalidArgument.
  double adaptive_min = 0.02;
  // kExact is correct; kBottomRight reproduces the public implementations'
  // mask so its error can be measured. Non-default on purpose.
  kernels::CausalMode causal = kernels::CausalMode::kExact;
  // At a check layer the probe computes fresh K/V for every still-selected
  // row; when true those fresh values replace the cached ones in the fused
  // cache also for the rows that are then dropped (free: already computed).
  // False reproduces the public implementations (dropped rows keep cache).
  bool scatter_probe_kv = true;
  // Skip recomputing K/V that the fused cache already holds exactly: at
  // layer 0 (input = token embeddings, so a loaded and re-rotated K/V is
  // what a recompute would give, up to the store's rounding) for every
  // selectable row, and at a check layer with scatter_probe_kv for the rows
  // the probe has just written. Those rows then project only Q (model::
  // LayerOptions::kv_in_cache). False: every recomputed row projects Q, K
  // and V (slower; layer-0 K/V then carry no f16 rounding).
  bool reuse_exact_kv = true;
  // Always recompute the first `chunk_head_tokens` rows of every cached,
  // non-exact segment (forced rows, in addition to the ratio). A chunk
  // precomputed alone uses its first tokens as its attention sink, so their
  // cached KV is the most distorted (EPIC's observation). Default 0.
  int chunk_head_tokens = 0;
  QueryLogits logits = QueryLogits::kLast;
  // Extra token slots in the fused cache after the prompt (for decoding).
  int64_t extra_capacity_tokens = 0;
  // Where the fused cache's memory comes from: a pool's kept buffer (not
  // owned; give BlendResult::cache back with Release when done), or
  // nullptr: a fresh allocation.
  model::KVCachePool* cache_pool = nullptr;
  // Load layer l+1 on a second thread while layer l is computed, at most
  // `prefetch_layers` layers ahead. False: load each layer right before use.
  bool overlap_loading = false;
  int prefetch_layers = 2;
  // Optional: called on the compute thread as soon as layer `layer` of the
  // fused cache is final (right after its forward; later layers never write
  // it), with the rows recomputed in it, so a caller can stream layer l while
  // l+1 computes. Read the layer inside the call (the cache object moves into
  // the result afterwards). An error aborts the blend with that status.
  std::function<absl::Status(int layer, const model::KVCache& cache,
                             absl::Span<const int32_t> recomputed_rows)>
      on_layer_done;
};

// MakeSchedule: the check layers for `ratio` on an `n_layers` model under
// options.filtering / first_check_layer / gradual_steps /
// gradual_first_factor (ignores options.schedule). Check layers past the
// last layer are dropped; ratio 0 gives an empty schedule. The first form
// takes first_check_layer -1 as layer 1; the others as BlendOptions says,
// with `sliding(l)` (or `cfg`) telling which layers are sliding-window ones.
std::vector<CheckLayer> MakeSchedule(const BlendOptions& options, int n_layers);
std::vector<CheckLayer> MakeSchedule(const BlendOptions& options, int n_layers,
                                     const std::function<bool(int)>& sliding);
std::vector<CheckLayer> MakeSchedule(const BlendOptions& options, const model::ModelConfig& cfg);

// RowsKept: the rows a check layer of ratio `ratio` keeps of `selectable`,
// never more than the `left` candidates: min(left, round(ratio x
// selectable)). The Blender's rule; the cost models follow it through
// RowsByLayer.
double RowsKept(double ratio, double selectable, double left);

// LayerRows: the selectable rows a layer recomputes, and the candidates
// probed there (0: no check cut rows at that layer).
struct LayerRows {
  double selected = 0;
  double probed = 0;
};
// RowsByLayer: per layer of an `n_layers` model, what the Blender
// recomputes under `schedule`: every selectable row at layer 0 (none when
// `recompute` is false: r = 0, full reuse), then at each check layer
// RowsKept of what is left. The stage model (CostModel::PredictBlend) and
// the planner (BlendRowsByLayer) use it.
std::vector<LayerRows> RowsByLayer(const std::vector<CheckLayer>& schedule, int n_layers,
                                   double selectable, bool recompute);

// StageTimings: wall seconds per stage of one Blend. load/rerotate run on the
// loader thread when loading overlaps compute; load_wait is the time compute
// spent waiting for a layer to arrive.
struct StageTimings {
  double load_s = 0;       // KvSource::ReadLayer (fetch + convert to f32)
  double rerotate_s = 0;   // RerotateKeys to global offsets
  double embed_s = 0;      // token embeddings of the recomputed rows
  double layer0_s = 0;     // layer 0 forward
  double selection_s = 0;  // probe (ProjectKV), deviation, top-k
  double recompute_s = 0;  // layers >= 1 forward over the selected rows
  double merge_s = 0;      // gathers/scatters/compaction of rows
  double logits_s = 0;     // final norm + classifier of the query rows
  double load_wait_s = 0;  // compute blocked on loading
  double total_s = 0;      // whole Blend call
  std::vector<double> layer_compute_s;  // per layer: selection + forward
  std::vector<double> layer_load_s;     // per layer: load + rerotate
};

// BlendResult: the fused cache and what was done to build it.
struct BlendResult {
  explicit BlendResult(model::KVCache c) : cache(std::move(c)) {}

  // Fused KV: every layer holds K/V for tokens 0..total_tokens-1 (prompt
  // order: prefix, chunks, query); num_tokens() == total_tokens; capacity
  // total_tokens + extra_capacity_tokens.
  model::KVCache cache;
  int64_t total_tokens = 0;
  int64_t query_begin = 0;  // position of the first query token
  int64_t query_tokens = 0;
  // Logits of the query rows per BlendOptions::logits: [logits_rows, vocab].
  std::vector<float> logits;
  int64_t logits_rows = 0;
  // recomputed[l]: sorted absolute positions of the rows whose layer-l block
  // was computed fresh (query and missed rows included).
  std::vector<std::vector<int32_t>> recomputed;
  int64_t selectable_tokens = 0;  // denominator of the ratio
  double applied_ratio = 0;       // final ratio used (the adaptive choice, else `ratio`)
  std::vector<CheckLayer> schedule;  // the schedule applied
  StageTimings timings;
};

class Blender {
 public:
  struct Options {
    const model::Model* model = nullptr;  // required; not owned, must outlive the Blender
  };

  // Create: InvalidArgument without a model.
  static absl::StatusOr<std::unique_ptr<Blender>> Create(const Options& options);

  // Blend: fuses `segments` (see file comment). Errors, always before any
  // output is produced: InvalidArgument for an empty chunk list, empty
  // segments, bad segment order (prefix first, query last and only once),
  // ratio or schedule outside [0,1], a cached chunk whose token count, layer
  // count, head layout or dtype disagrees with the model; FailedPrecondition
  // for a chunk with another model's fingerprint; OutOfRange when the prompt
  // exceeds the model's context length. Errors from a KvSource keep their
  // code, name the segment ("blend: segment <i> layer <l>: ...") and carry
  // a FailedLoad (FailedLoadOf), so a caller can blend again with that
  // segment as a miss; errors from the model are returned as is. No partial
  // result is ever returned (layers already given to on_layer_done stay
  // given: a caller that streamed them must tell its reader to drop them).
  absl::StatusOr<BlendResult> Blend(absl::Span<const BlendSegment> segments,
                                    const BlendOptions& options) const;

  const model::Model& model() const { return *model_; }

 private:
  explicit Blender(const model::Model* model);
  // The compute scratch of finished blends, kept for the next ones (at most
  // 4, each at most 256 MiB; a larger one is freed): a fresh one pays its
  // pages again on every call.
  std::unique_ptr<model::Workspace> AcquireWorkspace() const;
  void ReleaseWorkspace(std::unique_ptr<model::Workspace> ws) const;

  const model::Model* model_;
  mutable FreeList<std::unique_ptr<model::Workspace>> idle_ws_;  // thread-safe
};

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_BLENDER_H_
