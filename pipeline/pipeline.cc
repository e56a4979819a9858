#include "pipeline/pipeline.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "blend/blender.h"
#include "blend/loading_controller.h"
#include "blend/store_source.h"
#include "model/kv_cache_pool.h"
#include "model/model.h"
#include "pipeline/internal/budgets.h"
#include "pipeline/internal/pieces.h"
#include "pipeline/internal/prefix_cache.h"
#include "pipeline/internal/steps.h"

namespace ragkv::pipeline {
namespace {

using internal::BlendLayout;
using internal::Piece;

// NullMetrics: the sink when the caller gives none.
class NullMetrics final : public MetricSink {
 public:
  void Add(std::string_view, std::string_view, double) override {}
  void Observe(std::string_view, std::string_view, double) override {}
};

// LayerStream: the layers delivered so far (shared by every copy of the
// Blender's on_layer_done callback).
struct LayerStream {
  LayerSink* sink = nullptr;
  int64_t T = 0;
  double recomputed_sum = 0;  // rows recomputed, summed over layers >= 1
  int64_t recomputed_rows = 0;  // all layers
  int layers_sent = 0;

  absl::Status Deliver(int l, const model::KVCache& cache, absl::Span<const int32_t> rows) {
    if (l != layers_sent || cache.num_tokens() != T) {
      return absl::InternalError("blend: layers finished out of order or of another length");
    }
    RETURN_IF_ERROR(sink->OnLayer(l, cache, rows));
    if (l >= 1) recomputed_sum += static_cast<double>(rows.size());
    recomputed_rows += static_cast<int64_t>(rows.size());
    ++layers_sent;
    return absl::OkStatus();
  }
};

// PoolReturn: gives a fused cache's memory back to the pool when the
// request is done with it (null pool: the cache is simply freed).
class PoolReturn {
 public:
  PoolReturn(model::KVCachePool* pool, model::KVCache* cache) : pool_(pool), cache_(cache) {}
  PoolReturn(const PoolReturn&) = delete;
  PoolReturn& operator=(const PoolReturn&) = delete;
  ~PoolReturn() {
    if (pool_ != nullptr) pool_->Release(std::move(*cache_));
  }

 private:
  model::KVCachePool* pool_;
  model::KVCache* cache_;
};

// CheckPassagesAndSalt: a raw prompt's passages are sorted, disjoint,
// non-empty and end before its query tail; only raw prompts have them; the
// salt is bounded.
absl::Status CheckPassagesAndSalt(const Prompt& prompt, const RequestOptions& ro) {
  if (ro.cache_salt.size() > kMaxSaltBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("cache_salt is %d bytes (max %d)",
                                                      ro.cache_salt.size(), kMaxSaltBytes));
  }
  if (prompt.passages.empty()) return absl::OkStatus();
  if (!prompt.segments.empty()) {
    return absl::InvalidArgumentError("passages are given only with a raw prompt");
  }
  if (prompt.passages.size() > static_cast<size_t>(kMaxSegments / 2)) {
    return absl::InvalidArgumentError(absl::StrFormat("%d passages (max %d)",
                                                      prompt.passages.size(), kMaxSegments / 2));
  }
  const size_t query = std::max<size_t>(1, prompt.raw_query_tokens);
  const size_t limit = prompt.raw.size() > query ? prompt.raw.size() - query : 0;
  uint32_t at = 0;
  for (size_t i = 0; i < prompt.passages.size(); ++i) {
    const auto [b, e] = prompt.passages[i];
    if (b < at || e <= b || e > limit) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "passage %d [%d, %d) is empty, overlaps the one before or reaches the query tail "
          "(rows before %d)", i, b, e, limit));
    }
    at = e;
  }
  return absl::OkStatus();
}

}  // namespace

// Run: one request's state across its stages (not movable once streaming:
// the layer callback points into it).
struct Pipeline::RunState {
  const Options* o = nullptr;
  const RequestOptions* ro = nullptr;
  Clock::time_point t0;
  StageMs ms;
  std::vector<Piece> pieces;
  BlendLayout layout;
  blend::BlendOptions bo;
  std::vector<blend::Tier> served;  // the tiers that served the chunks
  bool controlled = false;          // the loading controller picks r
  std::string reason, gate_reason;
  LayerStream stream;
  std::function<absl::Status(int, const model::KVCache&, absl::Span<const int32_t>)> send_layer;
  std::vector<FailedLoad> failed;
};

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(Options options) {
  if (options.model == nullptr || options.blender == nullptr) {
    return absl::InvalidArgumentError("pipeline: a model and a blender are required");
  }
  if (options.metrics == nullptr) {
    static NullMetrics* const kNull = new NullMetrics();
    options.metrics = kNull;
  }
  std::unique_ptr<Pipeline> p(new Pipeline(std::move(options)));
  const Options& o = p->options_;
  if (o.store_back && o.store != nullptr) {
    ASSIGN_OR_RETURN(p->store_back_,
                     StoreBack::Create(o.model, o.store, o.metrics, o.store_back_options));
  }
  return p;
}

Pipeline::Pipeline(Options options)
    : options_(std::move(options)), budgets_(std::make_unique<internal::Budgets>()) {}

Pipeline::~Pipeline() { StopStoreBack(); }

void Pipeline::DrainStoreBack() const {
  if (store_back_ != nullptr) store_back_->Drain();
}

void Pipeline::StopStoreBack() {
  if (store_back_ != nullptr) store_back_->Stop();
}

bool Pipeline::PrefixCacheOn() const {
  return store_back_ != nullptr && options_.prefix_cache.enabled;
}

absl::StatusOr<Pipeline::Retrieved> Pipeline::Retrieve(const std::string& query, int k,
                                                       const std::string& system_prompt) const {
  if (options_.retriever == nullptr) {
    return absl::FailedPreconditionError("this server has no retrieval service");
  }
  const auto t0 = Clock::now();
  retrieval::SearchOptions so;
  so.k = k;
  so.with_text = false;
  so.mode = options_.search_mode;
  ASSIGN_OR_RETURN(auto hits, options_.retriever->Search(query, so));
  Retrieved r;
  r.retrieve_ms = MsSince(t0);
  if (hits.empty()) return absl::NotFoundError("retrieval found no chunks (empty corpus?)");
  if (!system_prompt.empty()) {
    r.prompt.segments.push_back({Segment::Source::kText, 0, {}, system_prompt});
  }
  for (const auto& h : hits) {
    r.prompt.segments.push_back({Segment::Source::kChunkId, static_cast<uint64_t>(h.chunk_id)});
    r.chunk_ids.push_back(static_cast<uint64_t>(h.chunk_id));
  }
  r.prompt.segments.push_back({Segment::Source::kText, 0, {}, query});
  return r;
}

absl::StatusOr<RequestResult> Pipeline::Run(const Prompt& prompt, const RequestOptions& ro,
                                            LayerSink* sink) const {
  RunState run;
  run.o = &options_;
  run.ro = &ro;
  run.t0 = Clock::now();
  run.stream.sink = sink;
  RETURN_IF_ERROR(Prepare(prompt, &run));
  RETURN_IF_ERROR(StartStream(&run));
  const auto t_blend = Clock::now();
  ASSIGN_OR_RETURN(blend::BlendResult r, BlendWithRecovery(&run));
  const PoolReturn give_back(options_.cache_pool, &r.cache);  // on every way out
  run.ms.blend = MsSince(t_blend);
  return Finish(&run, &r);
}

absl::Status Pipeline::Prepare(const Prompt& prompt, RunState* run) const {
  const Options& o = options_;
  if (prompt.segments.empty() && prompt.raw.empty()) {
    return absl::InvalidArgumentError("the prompt has no segments");
  }
  if (prompt.segments.size() > static_cast<size_t>(kMaxSegments)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d segments (max %d)", prompt.segments.size(), kMaxSegments));
  }
  RETURN_IF_ERROR(CheckPassagesAndSalt(prompt, *run->ro));
  const kvstore::Fingerprint traffic =
      kvstore::SaltedFingerprint(o.model->fingerprint(), run->ro->cache_salt);
  if (prompt.segments.empty()) {
    RETURN_IF_ERROR(internal::ResolveRaw(o, traffic, prompt, &run->pieces, &run->ms.fetch));
  } else {
    run->pieces.resize(prompt.segments.size());
    RETURN_IF_ERROR(
        internal::ResolveSegments(o, traffic, prompt.segments, &run->pieces, &run->ms.fetch));
  }
  run->layout.traffic = traffic;
  internal::MapSegments(o, run->ro->add_bos, run->pieces, &run->layout);
  if (internal::OpenFirstPosition(o, run->layout, &run->pieces, &run->ms.fetch)) {
    internal::BuildSegs(run->pieces, &run->layout);  // the first chunk reads another record
  }
  run->bo = internal::StrategyOptions(o, *run->ro);
  // kAuto: the loading controller picks r among the tiers that served the
  // chunks (ChooseRatioAndTier), then learns from the run.
  run->served = internal::ServedTiers(o, run->pieces);
  run->controlled =
      run->ro->mode == Mode::kAuto && o.controller != nullptr && !run->served.empty();
  run->gate_reason = internal::ApplyQualityGate(o, *run->ro, &run->bo, &run->controlled);
  run->bo.adaptive_min = std::min(run->bo.adaptive_min, run->bo.ratio);  // the floor under the cap
  if (run->ro->adaptive_budget > 0 && run->ro->mode == Mode::kCacheBlend &&
      run->bo.strategy == blend::Strategy::kCacheBlend) {
    ASSIGN_OR_RETURN(run->bo.recompute_budget, budgets_->For(run->ro->adaptive_budget));
    // A floor above the budget would break its ceiling (the Blender refuses
    // it): the server's default floor gives way to a small budget.
    run->bo.adaptive_min = run->bo.recompute_budget->Floor(run->bo.adaptive_min);
  }
  // The spans keep cache_hit: the record was found (what the wire has
  // always reported), though this strategy does not read it.
  if (internal::ReleaseUnused(run->bo.strategy, run->layout, &run->pieces)) {
    internal::BuildSegs(run->pieces, &run->layout);
  }
  if (run->ro->mode == Mode::kAuto && !run->controlled) {
    run->reason = o.controller == nullptr ? "no loading controller: default ratio"
                                          : "no cached chunk: default ratio";
  }
  return absl::OkStatus();
}

absl::Status Pipeline::StartStream(RunState* run) const {
  PromptInfo info;
  info.tokens = run->layout.Tokens(run->pieces);
  info.spans = run->layout.spans;
  const auto t_prefix = Clock::now();
  RETURN_IF_ERROR(
      internal::ApplyPrefixCache(options_, PrefixCacheOn(), &run->pieces, &run->layout));
  run->ms.fetch += MsSince(t_prefix);
  if (run->ro->not_found_when_cold && Cold(*run)) {
    if (store_back_ != nullptr) {
      for (internal::Miss& m : internal::Misses(run->pieces)) {
        store_back_->Schedule(m.key, std::move(m.tokens));
      }
    }
    options_.metrics->Add("ragkv_blend_cold_total", "");
    return absl::NotFoundError(
        "nothing of the prompt is stored (not_found_when_cold); its misses are being stored");
  }
  RETURN_IF_ERROR(run->stream.sink->OnPrompt(info));
  run->stream.T = run->layout.T;
  LayerStream* stream = &run->stream;
  run->send_layer = [stream](int l, const model::KVCache& cache,
                             absl::Span<const int32_t> rows) -> absl::Status {
    return stream->Deliver(l, cache, rows);
  };
  run->bo.on_layer_done = run->send_layer;
  return absl::OkStatus();
}

bool Pipeline::Cold(const RunState& run) const {
  if (run.layout.exact != nullptr) return false;
  return std::none_of(run.pieces.begin(), run.pieces.end(),
                      [](const Piece& p) { return p.stored; });
}

absl::StatusOr<blend::BlendResult> Pipeline::BlendOnce(RunState* run) const {
  if (run->controlled) {
    ASSIGN_OR_RETURN(blend::ControlledBlend cb,
                     options_.controller->Blend(run->layout.segs, run->served, run->send_layer,
                                                options_.cache_pool));
    run->bo.ratio = cb.decision.ratio;
    run->reason = cb.decision.why;
    return std::move(cb.result);
  }
  return options_.blender->Blend(run->layout.segs, run->bo);
}

absl::StatusOr<blend::BlendResult> Pipeline::BlendWithRecovery(RunState* run) const {
  for (;;) {
    absl::StatusOr<blend::BlendResult> blended = BlendOnce(run);
    if (blended.ok()) return blended;
    ASSIGN_OR_RETURN(const bool again, RecoverFailedLoad(blended.status(), run));
    if (!again) return blended.status();
    run->served = internal::ServedTiers(options_, run->pieces);  // kAuto decides on what is left
    if (run->controlled && run->served.empty()) {
      run->controlled = false;
      run->bo.ratio = options_.default_ratio;
      run->reason = "no cached chunk: default ratio";
    }
  }
}

absl::StatusOr<bool> Pipeline::RecoverFailedLoad(const absl::Status& st, RunState* run) const {
  FailedLoad fl;
  if (!internal::MarkFailedLoad(options_, st, &run->pieces, &run->layout, &fl)) return false;
  run->failed.push_back(fl);
  RETURN_IF_ERROR(internal::ReopenAll(options_, &run->pieces, &run->ms.fetch));
  internal::BuildSegs(run->pieces, &run->layout);
  RETURN_IF_ERROR(
      internal::ApplyPrefixCache(options_, PrefixCacheOn(), &run->pieces, &run->layout));
  if (run->stream.layers_sent > 0) {
    if (!run->ro->accept_restart) {
      return absl::DataLossError(absl::StrCat(
          st.message(), " (after layers were sent; the client does not accept restarts: "
                        "BlendOptions.accept_restart)"));
    }
    RETURN_IF_ERROR(run->stream.sink->OnRestart(fl));
    run->stream.layers_sent = 0;
    run->stream.recomputed_sum = 0;
    run->stream.recomputed_rows = 0;
  }
  return true;
}

absl::StatusOr<RequestResult> Pipeline::Finish(RunState* run, blend::BlendResult* r) const {
  const Options& o = options_;
  std::vector<internal::Miss> misses;  // failed ones too; read before the sources go
  if (store_back_ != nullptr) misses = internal::Misses(run->pieces);
  const int64_t exact_rows = internal::ExactRows(run->layout, run->bo.strategy);  // reads sources
  internal::ObserveBandwidth(o, run->bo, run->served, run->pieces, *r);
  internal::ObserveTierReads(o, run->bo.strategy, run->pieces);
  RequestResult res;
  for (const Piece& p : run->pieces) {
    if (p.store == nullptr) continue;
    res.kv_bytes_read += p.store->bytes_read();
    res.tiers.push_back(p.store->tier_index());
  }
  for (auto& p : run->pieces) p.source.reset();  // release pinned layers early (segs dangle now)
  run->layout.exact.reset();
  const int L = o.model->config().n_layers;
  if (run->stream.layers_sent != L || r->total_tokens != run->layout.T) {
    return absl::InternalError("blend: not every layer was streamed");
  }
  FillResult(*run, *r, &res);
  if (store_back_ != nullptr) {
    for (internal::Miss& m : misses) store_back_->Schedule(m.key, std::move(m.tokens));
    ScheduleFirstPosition(*run);
    internal::StorePrefixCache(o, PrefixCacheOn() ? store_back_.get() : nullptr, run->layout,
                               run->pieces, r->cache, exact_rows);
  }
  return res;
}

void Pipeline::ScheduleFirstPosition(const RunState& run) const {
  if (run.layout.first >= run.pieces.size()) return;
  const Piece& p = run.pieces[run.layout.first];
  if (!p.first_position_miss || p.covered || p.released) return;
  blend::NeighbourContext context;
  context.lead = run.layout.prefix;
  store_back_->ScheduleInContext(run.layout.traffic, std::move(context), p.tokens);
}

void Pipeline::FillResult(const RunState& run, const blend::BlendResult& r,
                          RequestResult* res) const {
  const int L = options_.model->config().n_layers;
  res->strategy = run.bo.strategy;
  res->ratio = run.bo.strategy == blend::Strategy::kCacheBlend ? r.applied_ratio : 0;  // the adaptive choice
  res->tokens = run.layout.T;
  res->mean_recomputed = L > 1 ? run.stream.recomputed_sum / (L - 1) : 0;
  res->recomputed_rows = run.stream.recomputed_rows;
  res->prefix_tokens = static_cast<int64_t>(run.layout.exact_tokens.size());
  res->controller_reason = run.reason;
  res->gate_reason = run.gate_reason;
  res->failed = run.failed;
  for (const internal::Piece& p : run.pieces) {
    const bool neighbour = p.context == kvstore::RecordContext::kNeighbours;
    res->neighbour_records += neighbour && p.stored && !p.failed && !p.first_position;
    // "unused": the first chunk's rows came from elsewhere, whether or not
    // its record was found (the strategy released it, the exact prefix
    // covered it, its load failed).
    const bool served = p.first_position && !p.failed && !p.covered && !p.released;
    res->first_position_records += served;
    res->neighbour_fallbacks +=
        p.neighbour_fallback || (neighbour && p.failed && !p.first_position);
    if (p.first_position || p.first_position_miss) {
      const bool unused = p.covered || p.released || p.failed;
      options_.metrics->Add("ragkv_first_position_records_total", served   ? "result=\"hit\""
                                                                  : unused ? "result=\"unused\""
                                                                           : "result=\"miss\"");
    }
  }
  res->timings = r.timings;
  res->ms = run.ms;
  res->ms.fetch += r.timings.load_s * 1e3;
  res->ms.recompute = (r.timings.recompute_s + r.timings.layer0_s) * 1e3;
  res->ms.retrieve = run.ro->retrieve_ms;
  res->ms.total = MsSince(run.t0) + run.ro->retrieve_ms;
  MetricSink* m = options_.metrics;
  for (const auto& [stage, ms] :
       {std::pair{"retrieve", res->ms.retrieve}, {"fetch", res->ms.fetch}, {"blend", res->ms.blend},
        {"recompute", res->ms.recompute}, {"total", res->ms.total}}) {
    m->Observe("ragkv_stage_ms", absl::StrFormat("stage=\"%s\"", stage), ms);
  }
  const double effective = res->tokens > 0 ? res->mean_recomputed / res->tokens : 0;
  m->Observe("ragkv_blend_ratio",
             absl::StrFormat("mode=\"%s\"", blend::StrategyName(res->strategy)), effective);
}

}  // namespace ragkv::pipeline
