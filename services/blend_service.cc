#include "services/blend_service.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "connector/wire.h"
#include "blend/blender.h"
#include "blend/loading_controller.h"
#include "blend/quality_gate.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "kvstore/tiered_store.h"
#include "model/kv_cache_pool.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "retrieval/retriever.h"
#include "services/internal/blend_pieces.h"
#include "services/internal/grpc_util.h"
#include "services/internal/prefix_cache.h"
#include "services/internal/store_back.h"
#include "services/internal/validate.h"

namespace ragkv::services {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

using internal::BlendLayout;
using internal::Piece;
using internal::ReopenAll;
using internal::ResolvePieces;
using internal::ResolveRaw;

// LayerDoneFn: the Blender's / controller's per-layer callback.
using LayerDoneFn =
    std::function<absl::Status(int, const model::KVCache&, absl::Span<const int32_t>)>;

// MapSegments: fills *out from the resolved pieces and the header's spans.
void MapSegments(const ServiceContext* ctx, const v1::BlendOptions& opts,
                 const std::vector<Piece>& pieces, BlendLayout* out) {
  // Map to Blender segments: leading fresh pieces -> one prefix; chunks and
  // fresh pieces between them -> chunks (fresh = a miss); last -> query.
  std::vector<int32_t>& prefix = out->prefix;
  const model::Tokenizer* tok = ctx->tokenizer;
  if (opts.add_bos() && tok != nullptr && tok->bos_id() >= 0) prefix.push_back(tok->bos_id());
  size_t first = 0;
  while (first + 1 < pieces.size() && !pieces[first].is_chunk) {
    prefix.insert(prefix.end(), pieces[first].tokens.begin(), pieces[first].tokens.end());
    ++first;
  }
  out->first = first;
  internal::BuildSegs(pieces, out);
  v1::BlendHeader& header = out->header;
  uint32_t pos = 0;
  if (!prefix.empty()) {
    v1::SegmentSpan* sp = header.add_spans();
    sp->set_begin(pos);
    pos += prefix.size();
    sp->set_end(pos);
  }
  for (size_t i = first; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    v1::SegmentSpan* sp = header.add_spans();
    sp->set_begin(pos);
    pos += p.tokens.size();
    sp->set_end(pos);
    sp->set_chunk_id(p.chunk_id);
    sp->set_is_chunk(p.is_chunk);
    sp->set_chunk_begin(static_cast<uint32_t>(p.chunk_begin));
    sp->set_cache_hit(p.source != nullptr);
  }
  int64_t T = static_cast<int64_t>(prefix.size());
  for (size_t i = first; i < pieces.size(); ++i) T += static_cast<int64_t>(pieces[i].tokens.size());
  out->T = T;
}

// Misses: the whole token lists of the chunks whose record missed (what
// store-back writes after the response).
std::vector<std::vector<int32_t>> Misses(const ServiceContext* ctx, const std::vector<Piece>& pieces) {
  std::vector<std::vector<int32_t>> out;
  if (ctx->store_back == nullptr) return out;
  for (const Piece& p : pieces) {
    if (p.is_chunk && p.source == nullptr && !p.covered) {
      out.push_back(p.whole.empty() ? p.tokens : p.whole);
    }
  }
  return out;
}

// StrategyOptions: the Blender options of the request's mode (AUTO: the
// server default ratio, which the controller's may replace later).
blend::BlendOptions StrategyOptions(const v1::BlendOptions& opts) {
  blend::BlendOptions bo;
  bo.logits = blend::QueryLogits::kNone;
  // Layer l+1 streams from the store while layer l is computed.
  bo.overlap_loading = true;
  switch (opts.mode()) {
    case v1::BLEND_MODE_FULL_PREFILL: bo.strategy = blend::Strategy::kFullPrefill; break;
    case v1::BLEND_MODE_PREFIX_CACHING: bo.strategy = blend::Strategy::kPrefixReuse; break;
    case v1::BLEND_MODE_FULL_REUSE: bo.strategy = blend::Strategy::kFullReuse; break;
    case v1::BLEND_MODE_AUTO:
      // The controller's ratio replaces this below; without a controller
      // (or a cached chunk) the server default, never the request's.
      bo.strategy = blend::Strategy::kCacheBlend;
      bo.ratio = kDefaultRecomputeRatio;
      break;
    default:
      bo.strategy = blend::Strategy::kCacheBlend;
      bo.ratio = opts.recompute_ratio() > 0 ? opts.recompute_ratio() : kDefaultRecomputeRatio;
  }
  return bo;
}

// ApplyQualityGate: the served model's gate on the request's options: blending
// off -> CacheBlend / full reuse become full prefill (counted); on -> its
// selector, and its ratio when the request leaves the ratio to the server
// (0; AUTO keeps the controller's). Returns the gate's reason ("" without one).
std::string ApplyQualityGate(const ServiceContext* ctx, const v1::BlendOptions& opts,
                             blend::BlendOptions* bo, bool* controlled) {
  const blend::GateDecision* g = ctx->quality_gate;
  if (g == nullptr) return "";
  const bool blends =
      bo->strategy == blend::Strategy::kCacheBlend || bo->strategy == blend::Strategy::kFullReuse;
  if (!g->blending && blends) {
    bo->strategy = blend::Strategy::kFullPrefill;
    bo->ratio = 0;
    *controlled = false;
    ctx->metrics->Add("ragkv_blend_gated_total", "");
    return g->reason;
  }
  if (bo->strategy == blend::Strategy::kCacheBlend) {
    bo->selector = g->selector;
    if (opts.mode() != v1::BLEND_MODE_AUTO && opts.recompute_ratio() <= 0) bo->ratio = g->ratio;
  }
  return g->reason;
}

// ServedTiers: the distinct cost-model tiers that serve the cached pieces,
// in order of first use.
std::vector<blend::Tier> ServedTiers(const ServiceContext* ctx, const std::vector<Piece>& pieces) {
  std::vector<blend::Tier> served;
  for (const Piece& p : pieces) {
    if (p.store == nullptr) continue;
    const std::optional<blend::Tier> t = blend::CostTierOf(ctx->store->tier(p.store->tier_index()).Kind());
    if (t && std::find(served.begin(), served.end(), *t) == served.end()) served.push_back(*t);
  }
  return served;
}

// SendHeader: completes layout->header (KV layout of T tokens of out_dtype,
// token ids, retrieved chunk ids) and pushes it, moving it out.
absl::Status SendHeader(const ServiceContext* ctx, kernels::DType out_dtype,
                        const std::vector<uint64_t>& retrieved, const std::vector<Piece>& pieces,
                        BlendLayout* layout, internal::StreamWriter<v1::BlendResponse>* w) {
  const model::ModelConfig& mc = ctx->model->config();
  const int64_t T = layout->T;
  v1::BlendHeader& header = layout->header;
  v1::KVLayout* kv_layout = header.mutable_layout();
  kv_layout->set_num_layers(mc.n_layers);
  kv_layout->set_num_kv_heads(mc.n_kv_heads);
  kv_layout->set_head_dim(mc.head_dim);
  kv_layout->set_num_tokens(static_cast<uint32_t>(T));
  kv_layout->set_dtype(wire::ToProto(out_dtype));
  kv_layout->set_model_fingerprint(wire::FingerprintBytes(ctx->model->fingerprint()));
  header.mutable_token_ids()->Add(layout->prefix.begin(), layout->prefix.end());
  for (size_t i = layout->first; i < pieces.size(); ++i) {
    header.mutable_token_ids()->Add(pieces[i].tokens.begin(), pieces[i].tokens.end());
  }
  for (uint64_t id : retrieved) header.add_retrieved_chunk_ids(id);
  v1::BlendResponse msg;
  *msg.mutable_header() = std::move(header);
  if (!w->Push(std::move(msg))) return absl::CancelledError("client went away");
  return absl::OkStatus();
}

// LayerStream: what streaming the layers needs, and what has been sent so
// far (shared by every copy of the on_layer_done callback).
struct LayerStream {
  internal::StreamWriter<v1::BlendResponse>* w = nullptr;
  kernels::DType out_dtype = kernels::DType::kF32;
  int64_t T = 0;              // prompt tokens
  size_t bytes = 0;           // bytes of one layer's K (or V) in out_dtype
  double recomputed_sum = 0;  // rows recomputed, summed over layers >= 1
  int layers_sent = 0;
  bool accept_restart = false;  // the client handles BlendRestart
};

// SendLayer: exports layer l of `cache` (checksum, recomputed-row mask) and
// pushes it; layers must arrive in order and cover T tokens.
absl::Status SendLayer(LayerStream* st, int l, const model::KVCache& cache,
                       absl::Span<const int32_t> rows) {
  const int64_t T = st->T;
  if (l != st->layers_sent || cache.num_tokens() != T) {
    return absl::InternalError("blend: layers finished out of order or of another length");
  }
  v1::BlendResponse m;
  v1::BlendLayer* bl = m.mutable_layer();
  v1::LayerKV* kv = bl->mutable_kv();
  kv->set_layer(l);
  kv->mutable_k()->resize(st->bytes);
  kv->mutable_v()->resize(st->bytes);
  RETURN_IF_ERROR(cache.ExportLayer(l, 0, T, st->out_dtype, kv->mutable_k()->data(),
                                    kv->mutable_v()->data()));
  kv->set_checksum(wire::LayerChecksum(kv->k(), kv->v()));
  std::string mask((T + 7) / 8, '\0');
  for (int32_t row : rows) {
    if (row >= 0 && row < T) mask[row / 8] |= static_cast<char>(1u << (row % 8));
  }
  if (l >= 1) st->recomputed_sum += static_cast<double>(rows.size());
  bl->set_recomputed_mask(std::move(mask));
  if (!st->w->Push(std::move(m))) return absl::CancelledError("client went away");
  ++st->layers_sent;
  return absl::OkStatus();
}

// BlendPieces: through the loading controller when `controlled` (bo->ratio
// and *reason then take its decision), else the Blender with *bo; each
// finished layer goes to `send_layer`.
absl::StatusOr<blend::BlendResult> BlendPieces(const ServiceContext* ctx,
                                               const std::vector<blend::BlendSegment>& segs,
                                               const std::vector<blend::Tier>& served,
                                               bool controlled, const LayerDoneFn& send_layer,
                                               blend::BlendOptions* bo, std::string* reason) {
  if (controlled) {
    ASSIGN_OR_RETURN(blend::ControlledBlend cb,
                     ctx->controller->Blend(segs, served, send_layer, ctx->cache_pool));
    bo->ratio = cb.decision.ratio;
    *reason = cb.decision.why;
    return std::move(cb.result);
  }
  return ctx->blender->Blend(segs, *bo);
}

// ObserveBandwidth: with a controller, one serving tier and everything
// loaded, feeds it the tier's loading bandwidth as this blend saw it.
void ObserveBandwidth(const ServiceContext* ctx, const blend::BlendOptions& bo,
                      const std::vector<blend::Tier>& served, const std::vector<Piece>& pieces,
                      const blend::BlendResult& r) {
  const bool loads_all = bo.strategy == blend::Strategy::kCacheBlend ||
                         bo.strategy == blend::Strategy::kFullReuse;
  if (ctx->controller != nullptr && loads_all && served.size() == 1 && r.timings.load_s > 0) {
    // The serving tier's loading bandwidth as this blend saw it: bytes over
    // the time the loader spent in ReadLayer (stream + decode; the tier-side
    // counters would also count the producer's waits on a full queue).
    uint64_t bytes = 0;
    for (const Piece& p : pieces) {
      if (p.store != nullptr) bytes += p.store->bytes_read();
    }
    if (bytes > 0) {
      ctx->controller->ObserveTierBandwidth(served.front(),
                                            static_cast<double>(bytes) / r.timings.load_s);
    }
  }
}

// RecoverFailedLoad: when `st` is a failed load of a cached piece (or of
// the stored exact prefix), turns it into a miss (drops the prefix),
// reopens the other pieces' records (their streams were consumed), maps the
// segments again, voids the layers streamed so far (a BlendRestart) and
// returns true: the caller blends again. False for any other error.
absl::StatusOr<bool> RecoverFailedLoad(const ServiceContext* ctx, const absl::Status& st,
                                       std::vector<Piece>* pieces, BlendLayout* layout,
                                       LayerStream* stream, std::vector<v1::FailedLoad>* failed,
                                       double* fetch_ms) {
  const std::optional<blend::FailedLoad> f = blend::FailedLoadOf(st);
  if (!f || f->segment < 0 || f->segment >= static_cast<int>(layout->seg_piece.size())) {
    return false;
  }
  const int owner = layout->seg_piece[static_cast<size_t>(f->segment)];
  v1::FailedLoad& fl = failed->emplace_back();
  fl.set_layer(static_cast<uint32_t>(f->layer));
  fl.set_reason(std::string(st.message()));
  if (owner == internal::kExactSegment) {
    layout->exact_failed = true;  // fl.span 0, chunk 0: the prompt's stored prefix
  } else if (owner >= 0 && (*pieces)[static_cast<size_t>(owner)].source != nullptr) {
    Piece& bad = (*pieces)[static_cast<size_t>(owner)];
    bad.failed = true;
    // A record that failed to verify (a layer missing, corrupt or cut) may
    // still have its header, which store-back takes for "stored": delete
    // it so that it is rewritten. An outage leaves the record alone.
    if (!absl::IsUnavailable(st) && !absl::IsDeadlineExceeded(st)) {
      const kvstore::ChunkKey key = kvstore::ChunkKey::Of(
          ctx->model->fingerprint(), bad.whole.empty() ? bad.tokens : bad.whole);
      if (absl::Status d = ctx->store->Delete(key); !d.ok()) {
        RAGKV_LOG(WARNING) << "blend: deleting failed record " << key.ToHex() << ": " << d;
      }
    }
    fl.set_span(layout->SpanOf(static_cast<size_t>(owner)));
    fl.set_chunk_id(bad.chunk_id);
  } else {
    failed->pop_back();
    return false;
  }
  ctx->metrics->Add("ragkv_blend_failed_loads_total",
                    absl::StrFormat("code=\"%s\"", absl::StatusCodeToString(st.code())));
  RAGKV_LOG(WARNING) << "blend: "
                     << (owner < 0 ? std::string("the stored exact prefix")
                                   : absl::StrCat("chunk ", fl.chunk_id(), " (span ", fl.span(), ")"))
                     << " failed at layer " << f->layer << ", recomputed as a miss: " << st;
  RETURN_IF_ERROR(ReopenAll(ctx, pieces, fetch_ms));
  internal::BuildSegs(*pieces, layout);
  RETURN_IF_ERROR(internal::ApplyPrefixCache(ctx, pieces, layout));
  if (stream->layers_sent > 0) {
    if (!stream->accept_restart) {
      return absl::DataLossError(absl::StrCat(
          st.message(), " (after layers were sent; the client does not accept restarts: "
                        "BlendOptions.accept_restart)"));
    }
    v1::BlendResponse m;
    *m.mutable_restart()->mutable_failed() = fl;
    if (!stream->w->Push(std::move(m))) return absl::CancelledError("client went away");
    stream->layers_sent = 0;
    stream->recomputed_sum = 0;
  }
  return true;
}

// ObserveTierReads: each stored chunk's read time, by the tier that served
// it, for strategies that read every layer (streams still parked on a full
// queue, e.g. under full prefill, say nothing about the tier).
void ObserveTierReads(const ServiceContext* ctx, blend::Strategy strategy,
                      const std::vector<Piece>& pieces) {
  if (strategy != blend::Strategy::kCacheBlend && strategy != blend::Strategy::kFullReuse) return;
  for (const Piece& p : pieces) {
    if (p.store == nullptr || !p.store->finished()) continue;
    ctx->metrics->Observe(
        "ragkv_tier_read_ms",
        absl::StrFormat("tier=\"%s\"", std::string(ctx->store->tier(p.store->tier_index()).Name())),
        p.store->read_seconds() * 1e3);
  }
}

// StageMs: the stage times the summary reports.
struct StageMs {
  Clock::time_point t_total;  // start of RunBlend
  double retrieve_ms = 0;
  double fetch_ms = 0;        // opening the store sources
  double blend_ms = 0;
};

// SendSummary: pushes the summary (recomputed rows, ratios, controller
// reason, stage timings) and records the stage and ratio metrics.
absl::Status SendSummary(const ServiceContext* ctx, const blend::BlendOptions& bo,
                         const std::string& reason, const std::string& gate_reason,
                         const blend::BlendResult& r, const LayerStream& stream, int L,
                         const StageMs& times, const std::vector<v1::FailedLoad>& failed,
                         int64_t prefix_tokens) {
  const int64_t T = stream.T;
  v1::BlendResponse sm;
  v1::BlendSummary* s = sm.mutable_summary();
  const double mean_recomputed = L > 1 ? stream.recomputed_sum / (L - 1) : 0;
  s->set_recomputed_tokens(static_cast<uint32_t>(mean_recomputed + 0.5));
  s->set_effective_ratio(T > 0 ? static_cast<float>(mean_recomputed / T) : 0.f);
  s->set_ratio(bo.strategy == blend::Strategy::kCacheBlend ? static_cast<float>(bo.ratio) : 0.f);
  s->set_controller_reason(reason);
  s->set_quality_gate(gate_reason);
  for (const v1::FailedLoad& f : failed) *s->add_failed_loads() = f;
  s->set_prefix_tokens(static_cast<uint32_t>(prefix_tokens));
  const double total_ms = MsSince(times.t_total) + times.retrieve_ms;
  const double load_ms = r.timings.load_s * 1e3;
  auto add = [&](const char* stage, double ms) {
    v1::StageTiming* t = s->add_timings();
    t->set_stage(stage);
    t->set_ms(ms);
    ctx->metrics->Observe("ragkv_stage_ms", absl::StrFormat("stage=\"%s\"", stage), ms);
  };
  add("retrieve", times.retrieve_ms);
  add("fetch", times.fetch_ms + load_ms);
  add("blend", times.blend_ms);
  add("recompute", r.timings.recompute_s * 1e3 + r.timings.layer0_s * 1e3);
  add("total", total_ms);
  ctx->metrics->Observe("ragkv_blend_ratio", absl::StrFormat("mode=\"%s\"",
                                                             blend::StrategyName(bo.strategy)),
                        s->effective_ratio());
  if (!stream.w->Push(std::move(sm))) return absl::CancelledError("client went away");
  return absl::OkStatus();
}

// PoolReturn: gives a fused cache's memory back to the server's pool when
// the request is done with it (nullptr pool: the cache is simply freed).
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

// BlendRun: one Blend / RetrieveAndBlend request's state across its stages
// (not movable once streaming: the layer callback points into it).
struct BlendRun {
  const ServiceContext* ctx = nullptr;
  StageMs times;
  kernels::DType out_dtype = kernels::DType::kF32;
  std::vector<Piece> pieces;
  BlendLayout layout;
  blend::BlendOptions bo;
  std::vector<blend::Tier> served;  // the tiers that served the chunks
  bool controlled = false;          // the loading controller picks r
  std::string reason, gate_reason;
  LayerStream stream;
  LayerDoneFn send_layer;
  std::vector<v1::FailedLoad> failed;
};

// PrepareRun: resolves every segment (or the raw prompt), maps them onto
// the prompt and settles the strategy, ratio and controller.
absl::Status PrepareRun(const google::protobuf::RepeatedPtrField<v1::Segment>& segments,
                        const v1::RawPrompt* raw, const v1::BlendOptions& opts, BlendRun* run) {
  const ServiceContext* ctx = run->ctx;
  if (opts.output_dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(run->out_dtype, wire::KernelDTypeFromProto(opts.output_dtype()));
  }
  if (raw != nullptr) {
    RETURN_IF_ERROR(ResolveRaw(ctx, *raw, &run->pieces, &run->times.fetch_ms));
  } else {
    run->pieces.resize(segments.size());
    RETURN_IF_ERROR(ResolvePieces(ctx, segments, &run->pieces, &run->times.fetch_ms));
  }
  MapSegments(ctx, opts, run->pieces, &run->layout);
  run->bo = StrategyOptions(opts);
  run->bo.cache_pool = ctx->cache_pool;
  // BLEND_MODE_AUTO: the loading controller picks r among the tiers that
  // served the chunks (ChooseRatioAndTier), then learns from the run.
  run->served = ServedTiers(ctx, run->pieces);
  run->controlled =
      opts.mode() == v1::BLEND_MODE_AUTO && ctx->controller != nullptr && !run->served.empty();
  run->gate_reason = ApplyQualityGate(ctx, opts, &run->bo, &run->controlled);
  if (opts.mode() == v1::BLEND_MODE_AUTO && !run->controlled) {
    run->reason = ctx->controller == nullptr ? "no loading controller: default ratio"
                                             : "no cached chunk: default ratio";
  }
  return absl::OkStatus();
}

// StartLayerStream: the header now, then each layer as soon as the Blender
// finishes it (on_layer_done: layer l goes out while l+1 computes).
absl::Status StartLayerStream(const v1::BlendOptions& opts, const std::vector<uint64_t>& retrieved,
                              internal::StreamWriter<v1::BlendResponse>* w, BlendRun* run) {
  const ServiceContext* ctx = run->ctx;
  const model::ModelConfig& mc = ctx->model->config();
  RETURN_IF_ERROR(SendHeader(ctx, run->out_dtype, retrieved, run->pieces, &run->layout, w));
  const auto t_prefix = Clock::now();
  RETURN_IF_ERROR(internal::ApplyPrefixCache(ctx, &run->pieces, &run->layout));
  run->times.fetch_ms += MsSince(t_prefix);
  LayerStream& stream = run->stream;
  stream.w = w;
  stream.out_dtype = run->out_dtype;
  stream.T = run->layout.T;
  stream.accept_restart = opts.accept_restart();
  stream.bytes = static_cast<size_t>(mc.n_kv_heads) * run->layout.T * mc.head_dim *
                 kernels::DTypeSize(run->out_dtype);
  run->send_layer = [&stream](int l, const model::KVCache& cache,
                              absl::Span<const int32_t> rows) -> absl::Status {
    return SendLayer(&stream, l, cache, rows);
  };
  run->bo.on_layer_done = run->send_layer;
  return absl::OkStatus();
}

// BlendWithRecovery: blends; a chunk whose stored KV fails mid-blend is
// recomputed: blend again with it as a miss (each round removes one
// source, so this ends).
absl::StatusOr<blend::BlendResult> BlendWithRecovery(BlendRun* run) {
  const ServiceContext* ctx = run->ctx;
  for (;;) {
    absl::StatusOr<blend::BlendResult> blended =
        BlendPieces(ctx, run->layout.segs, run->served, run->controlled, run->send_layer, &run->bo,
                    &run->reason);
    if (blended.ok()) return blended;
    ASSIGN_OR_RETURN(const bool again,
                     RecoverFailedLoad(ctx, blended.status(), &run->pieces, &run->layout,
                                       &run->stream, &run->failed, &run->times.fetch_ms));
    if (!again) return blended.status();
    run->served = ServedTiers(ctx, run->pieces);  // AUTO decides on what is left
    if (run->controlled && run->served.empty()) {
      run->controlled = false;
      run->bo.ratio = kDefaultRecomputeRatio;
      run->reason = "no cached chunk: default ratio";
    }
  }
}

// RunBlend: resolves `segments`, blends, and streams the result into `w`:
// header, layers, summary; then schedules the misses for storing.
absl::Status RunBlend(const ServiceContext* ctx,
                      const google::protobuf::RepeatedPtrField<v1::Segment>& segments,
                      const v1::RawPrompt* raw, const v1::BlendOptions& opts,
                      std::vector<uint64_t> retrieved, double retrieve_ms,
                      internal::StreamWriter<v1::BlendResponse>* w) {
  BlendRun run;
  run.ctx = ctx;
  run.times.t_total = Clock::now();
  run.times.retrieve_ms = retrieve_ms;
  if (ctx->model == nullptr || ctx->blender == nullptr) {
    return absl::FailedPreconditionError("this server has no model loaded (--model)");
  }
  // The request itself was validated by the handler (internal/validate.h).
  if (segments.empty() && raw == nullptr) return absl::InvalidArgumentError("no segments");
  RETURN_IF_ERROR(PrepareRun(segments, raw, opts, &run));
  RETURN_IF_ERROR(StartLayerStream(opts, retrieved, w, &run));
  const auto t_blend = Clock::now();
  ASSIGN_OR_RETURN(blend::BlendResult r, BlendWithRecovery(&run));
  const PoolReturn give_back(ctx->cache_pool, &r.cache);  // on every way out
  run.times.blend_ms = MsSince(t_blend);
  std::vector<std::vector<int32_t>> misses = Misses(ctx, run.pieces);  // failed ones included
  const int64_t exact_rows = internal::ExactRows(run.layout, run.bo.strategy);  // reads the sources
  ObserveBandwidth(ctx, run.bo, run.served, run.pieces, r);
  ObserveTierReads(ctx, run.bo.strategy, run.pieces);
  for (auto& p : run.pieces) p.source.reset();  // release pinned layers early (segs dangle now)
  run.layout.exact.reset();

  const int L = ctx->model->config().n_layers;
  if (run.stream.layers_sent != L || r.total_tokens != run.layout.T) {
    return absl::InternalError("blend: not every layer was streamed");
  }
  RETURN_IF_ERROR(SendSummary(ctx, run.bo, run.reason, run.gate_reason, r, run.stream, L, run.times,
                              run.failed, static_cast<int64_t>(run.layout.exact_tokens.size())));
  if (ctx->store_back == nullptr) return absl::OkStatus();
  for (std::vector<int32_t>& t : misses) ctx->store_back->Schedule(std::move(t));
  internal::StorePrefixCache(ctx, run.layout, run.pieces, r.cache, exact_rows);
  return absl::OkStatus();
}

}  // namespace

grpc::ServerWriteReactor<v1::BlendResponse>* BlendServiceImpl::Blend(
    grpc::CallbackServerContext* c, const v1::BlendRequest* req) {
  return internal::StartStream<v1::BlendResponse>(
      c, ctx_->executor, ctx_->gate,
      [this, req](internal::StreamWriter<v1::BlendResponse>* w) -> absl::Status {
        RETURN_IF_ERROR(internal::ValidateBlendRequest(
            *req, ctx_->model != nullptr ? ctx_->model->config().vocab_size : 0));
        return RunBlend(ctx_, req->segments(), req->has_raw() ? &req->raw() : nullptr,
                        req->options(), {}, 0, w);
      });
}

grpc::ServerWriteReactor<v1::BlendResponse>* BlendServiceImpl::RetrieveAndBlend(
    grpc::CallbackServerContext* c, const v1::RetrieveAndBlendRequest* req) {
  return internal::StartStream<v1::BlendResponse>(
      c, ctx_->executor, ctx_->gate,
      [this, req](internal::StreamWriter<v1::BlendResponse>* w) -> absl::Status {
        RETURN_IF_ERROR(internal::ValidateRetrieveAndBlendRequest(*req));
        if (ctx_->retriever == nullptr) {
          return absl::FailedPreconditionError("this server has no retrieval service");
        }
        const auto t0 = Clock::now();
        retrieval::SearchOptions so;
        so.k = static_cast<int>(req->k());
        so.with_text = false;
        so.mode = ctx_->search_mode;  // the server's --search-mode
        ASSIGN_OR_RETURN(auto hits, ctx_->retriever->Search(req->query(), so));
        const double retrieve_ms = MsSince(t0);
        if (hits.empty()) return absl::NotFoundError("retrieval found no chunks (empty corpus?)");
        google::protobuf::RepeatedPtrField<v1::Segment> segs;
        if (!req->system_prompt().empty()) segs.Add()->set_text(req->system_prompt());
        std::vector<uint64_t> ids;
        for (const auto& h : hits) {
          segs.Add()->set_chunk_id(static_cast<uint64_t>(h.chunk_id));
          ids.push_back(static_cast<uint64_t>(h.chunk_id));
        }
        segs.Add()->set_text(req->query());
        return RunBlend(ctx_, segs, nullptr, req->options(), std::move(ids), retrieve_ms, w);
      });
}

}  // namespace ragkv::services
