#include "blend/blender.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/sync.h"
#include "blend/internal/blend_plan.h"
#include "blend/internal/failed_load.h"
#include "blend/internal/kv_rows.h"
#include "blend/internal/lookahead.h"
#include "blend/internal/selectors.h"
#include "kernels/deviation.h"
#include "kernels/rope.h"

namespace ragkv::blend {

using kernels::DType;
using kernels::TensorView;

using internal::GatherKv;
using internal::GatherRows;
using internal::KvPlane;
using internal::ScatterKv;
using internal::kSelectable;
using internal::Plan;

namespace {

// The Blender keeps at most this much compute scratch between calls.
constexpr size_t kMaxKeptWorkspaceBytes = size_t{256} << 20;
constexpr size_t kMaxKeptWorkspaces = 4;

// NewResult: a result holding the zeroed fused cache (plan.total valid
// tokens, capacity plan.total + extra_capacity_tokens) and per-layer timings.
absl::StatusOr<BlendResult> NewResult(const model::ModelConfig& cfg, const Plan& plan,
                                      const BlendOptions& options) {
  const int L = cfg.n_layers;
  const int64_t N = plan.total;
  const int64_t capacity = N + options.extra_capacity_tokens;
  ASSIGN_OR_RETURN(model::KVCache cache, options.cache_pool != nullptr
                                             ? options.cache_pool->Create(cfg, capacity)
                                             : model::KVCache::Create(cfg, capacity));
  RETURN_IF_ERROR(cache.set_num_tokens(N));
  BlendResult result(std::move(cache));
  StageTimings& tm = result.timings;
  tm.layer_compute_s.assign(L, 0.0);
  tm.layer_load_s.assign(L, 0.0);
  return result;
}

// RecomputeState: the compute thread's working set: the rows recomputed at
// the current layer (sorted positions), their hidden states, and scratch.
struct RecomputeState {
  model::Workspace* ws = nullptr;  // the Blender's, lent for this call
  std::vector<int32_t> rows;  // sorted positions
  std::vector<float> hidden;  // [rows.size(), dim]
  std::vector<float> probe_h, fk, fv, ck, cv, dev, dev_v;
  std::vector<int32_t> cand_idx, cand_pos, top;
  std::vector<uint8_t> keep, kv_in_cache;
};

// BlendRun: one Blend call past planning: loads the cached KV into
// result.cache (this thread or a loader thread), recomputes the selected
// rows layer by layer and fills result.recomputed, logits and timings.
// Single use: call Run() once; `result` must outlive the BlendRun.
class BlendRun {
 public:
  BlendRun(const model::Model& m, absl::Span<const BlendSegment> segments,
           const BlendOptions& options, const Plan& plan, BlendResult& result,
           model::Workspace* ws)
      : ws_(ws),
        m_(m),
        cfg_(m.config()),
        segments_(segments),
        options_(options),
        plan_(plan),
        result_(result),
        kv_(result.cache),
        tm_(result.timings),
        L_(cfg_.n_layers),
        N_(plan.total),
        capacity_(N_ + options.extra_capacity_tokens),
        dim_(cfg_.dim),
        hd_(cfg_.head_dim),
        kvh_(cfg_.n_kv_heads),
        need_load_(!plan.load_segments.empty()),
        threaded_(need_load_ && options.overlap_loading && L_ > 1),
        adaptive_pending_((options.adaptive_mass > 0 || options.adaptive_threshold > 0 ||
                           options.recompute_budget != nullptr) &&
                          !plan.schedule.empty()) {
    result.applied_ratio = options.strategy == Strategy::kCacheBlend ? options.ratio : 0;
  }

  BlendRun(const BlendRun&) = delete;
  BlendRun& operator=(const BlendRun&) = delete;

  // Run: loads and computes every layer; then the loader's error, if any.
  // On success also sets timings.load_s / rerotate_s.
  absl::Status Run();

 private:
  // Plane: layer l's K (key) or V plane of the fused cache.
  KvPlane Plane(int l, bool key) {
    return KvPlane{key ? kv_.k_data(l) : kv_.v_data(l), capacity_ * hd_, hd_, kvh_};
  }
  // CandView: an f32 [kv_heads, nc, hd] view of a candidates' K/V buffer.
  TensorView CandView(std::vector<float>& buf, int64_t nc) {
    return TensorView::Contiguous(buf.data(), DType::kF32, {kvh_, nc, hd_});
  }

  // ---- loading (this thread or a loader thread) ----
  // LoadLayer: reads layer l of every loaded segment into the fused cache and
  // re-rotates its keys to the segment's offset; errors name the segment.
  absl::Status LoadLayer(int l);
  // StartLoader: starts the loader thread when loading overlaps compute.
  void StartLoader();
  // LoaderLoop: the loader thread: loads layers in order, at most
  // prefetch_layers ahead of compute, until done, stopped or failed.
  void LoaderLoop();
  // WaitLayer: returns once layer l is in the cache (loading it here when
  // not threaded); the loader's error, or Aborted when it was stopped.
  absl::Status WaitLayer(int l);
  // MarkConsumed: tells the loader that layers [0, l] are done computing.
  void MarkConsumed(int l);
  // FinishLoader: joins the loader thread (stopping it first if `failed`).
  void FinishLoader(bool failed);
  // LoadStatus: the loader thread's error (OK when none or not threaded).
  absl::Status LoadStatus();

  // ---- compute ----
  // Compute: embeds the initial rows, runs every layer (selection at check
  // layers, forward of the selected rows), then the query logits.
  absl::Status Compute();
  // EmbedRows: s->hidden = token embeddings of s->rows.
  absl::Status EmbedRows(RecomputeState* s);
  // SelectRows: check layer l: probes the selectable rows of s->rows, ranks
  // them by deviation and keeps the top `check.ratio` share; *probed is set
  // when the probe's fresh K/V were scattered into the cache.
  absl::Status SelectRows(int l, const CheckLayer& check, RecomputeState* s, bool* probed);
  // ProbeCandidates: gathers the candidates' hidden states and cached K/V
  // (s->ck, s->cv) and projects their fresh K/V at layer l (s->fk, s->fv).
  absl::Status ProbeCandidates(int l, const KvPlane& pk, const KvPlane& pv, RecomputeState* s);
  // ScoreCandidates: s->dev[i] = deviation of candidate i's fresh K/V from
  // its cached K/V, per options.deviation.
  absl::Status ScoreCandidates(RecomputeState* s);
  // ScoreBySelector: s->dev holds the deviation (or zeros); turns it into
  // the options' selector score. `err` (may be null) holds the deviation
  // too and becomes the estimated error: x the query's attention (left as
  // the deviation when the blend has no query rows).
  absl::Status ScoreBySelector(int l, const KvPlane& pk, RecomputeState* s,
                               std::vector<float>* err);
  // QueryAttention: *att[i] = the attention mass the query rows put on
  // candidate i at layer l (internal::QueryAttentionScores); empty when the
  // blend has no query rows.
  absl::Status QueryAttention(int l, const KvPlane& pk, RecomputeState* s,
                              std::vector<float>* att);
  // QueryInputs: the query rows of s->rows: positions and layer inputs.
  void QueryInputs(const RecomputeState& s, std::vector<int32_t>* pos,
                   std::vector<float>* hidden) const;
  // LookaheadScores: s->dev *= the query's attention on each candidate in
  // the layers after l it reaches (run at the first check, advanced by its
  // horizon at each later one; at the last layer, l's own attention).
  absl::Status LookaheadScores(int l, const std::vector<float>& att, RecomputeState* s);
  // AdaptiveErrorBase: the adaptive ratio's error before the attention
  // factor: the selector's deviation (adaptive_mass), or (threshold and
  // budget rules) the relative deviation / (query rows x heads).
  absl::Status AdaptiveErrorBase(RecomputeState* s, std::vector<float>* err);
  // WantRows: rows a check layer of `ratio` keeps (scaled by the adaptive
  // choice), at most nc.
  int64_t WantRows(double ratio, int64_t nc) const;
  // ChooseAdaptiveRatio: ratio_scale_ and result_.applied_ratio at the first
  // check, by internal::AdaptiveCount's rule over `err` (`score`: the order).
  void ChooseAdaptiveRatio(const std::vector<float>& score, const std::vector<float>& err);
  // CompactRows: drops the candidates not in s->top from s->rows and
  // s->hidden, in place, keeping the order.
  void CompactRows(RecomputeState* s);
  // ForwardRows: runs layer l over s->rows (their fresh K/V land in the
  // cache), records them in result.recomputed[l] and calls on_layer_done.
  absl::Status ForwardRows(int l, bool probed, RecomputeState* s);
  // ComputeLogits: result.logits of the query rows per options.logits.
  absl::Status ComputeLogits(RecomputeState* s);

  model::Workspace* ws_;  // lent by the Blender
  const model::Model& m_;
  const model::ModelConfig& cfg_;
  const absl::Span<const BlendSegment> segments_;
  const BlendOptions& options_;
  const Plan& plan_;
  BlendResult& result_;
  model::KVCache& kv_;
  StageTimings& tm_;
  const int L_;
  const int64_t N_;
  const int64_t capacity_;
  const int64_t dim_;
  const int64_t hd_;
  const int kvh_;
  const bool need_load_;
  const bool threaded_;
  double ratio_scale_ = 1.0;     // adaptive ratio / options ratio
  bool adaptive_pending_ = false;  // the first check layer chooses the ratio
  internal::QueryLookahead lookahead_;  // lookahead-deviation: from the first check on
  int sync_loaded_ = 0;                 // not threaded: layers [0, sync_loaded_) loaded
  // A look-ahead may run: the loader ignores the prefetch window.
  const bool lookahead_loads_all_ =
      options_.selector == Selector::kLookaheadDeviation && !plan_.schedule.empty() &&
      plan_.query_tokens > 0;

  // Written by whichever thread loads; read after the loader is joined.
  double load_s_ = 0, rerotate_s_ = 0;
  Mutex mu_;
  int loaded_ ABSL_GUARDED_BY(mu_) = 0;     // layers [0, loaded) are in the cache
  int consumed_ ABSL_GUARDED_BY(mu_) = 0;   // layers [0, consumed) are done computing
  bool stop_ ABSL_GUARDED_BY(mu_) = false;  // compute failed: loader must exit
  absl::Status load_status_ ABSL_GUARDED_BY(mu_);
  std::thread loader_;
};

absl::Status BlendRun::Run() {
  StartLoader();
  absl::Status st = Compute();
  FinishLoader(!st.ok());
  if (!st.ok()) return st;
  RETURN_IF_ERROR(LoadStatus());
  tm_.load_s = load_s_;
  tm_.rerotate_s = rerotate_s_;
  return absl::OkStatus();
}

absl::Status BlendRun::LoadLayer(int l) {
  const Clock::time_point t0 = Clock::now();
  for (int si : plan_.load_segments) {
    const int64_t off = plan_.seg_offset[si];
    const int64_t T = static_cast<int64_t>(segments_[si].tokens.size());
    const TensorView dk = TensorView::Strided(kv_.k_data(l) + off * hd_, DType::kF32,
                                              {kvh_, T, hd_}, {capacity_ * hd_, hd_, 1});
    const TensorView dv = TensorView::Strided(kv_.v_data(l) + off * hd_, DType::kF32,
                                              {kvh_, T, hd_}, {capacity_ * hd_, hd_, 1});
    const Clock::time_point ta = Clock::now();
    if (absl::Status st = segments_[si].kv->ReadLayer(l, dk, dv); !st.ok()) {
      // Keep the code, name the segment; say which load failed.
      return internal::WithFailedLoad(
          absl::Status(st.code(), absl::StrCat("blend: segment ", si, " layer ", l, ": ",
                                               st.message())),
          si, l);
    }
    load_s_ += SecondsSince(ta);
    // Rows sit at chunk-local positions first_position.. (0 for a whole chunk).
    const int64_t delta = off - segments_[si].kv->info().first_position;
    if (delta != 0) {
      const Clock::time_point tb = Clock::now();
      // Each layer's own RoPE (gemma3's sliding-window layers: their local
      // base; docs/gemma3.md section 4 rule 1).
      RETURN_IF_ERROR(kernels::RerotateKeys(dk, delta, cfg_.LayerRope(l)));
      rerotate_s_ += SecondsSince(tb);
    }
  }
  tm_.layer_load_s[l] = SecondsSince(t0);
  return absl::OkStatus();
}

void BlendRun::StartLoader() {
  if (threaded_) {
    loader_ = std::thread([this, rid = CurrentRequestId()] {
      ScopedRequestId scoped(rid);
      LoaderLoop();
    });
  }
}

void BlendRun::LoaderLoop() {
  for (int l = 0; l < L_; ++l) {
    {
      MutexLock lock(&mu_);
      auto can_go = [this, l]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || l < consumed_ + options_.prefetch_layers || lookahead_loads_all_;
      };
      mu_.Await(can_go);
      if (stop_) return;
    }
    absl::Status st = LoadLayer(l);
    MutexLock lock(&mu_);
    if (!st.ok()) {
      load_status_ = st;
      stop_ = true;
      return;
    }
    loaded_ = l + 1;
  }
}

absl::Status BlendRun::WaitLayer(int l) {
  if (!need_load_) return absl::OkStatus();
  if (!threaded_) {
    for (; sync_loaded_ <= l; ++sync_loaded_) RETURN_IF_ERROR(LoadLayer(sync_loaded_));
    return absl::OkStatus();
  }
  const Clock::time_point t0 = Clock::now();
  MutexLock lock(&mu_);
  auto ready = [this, l]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || loaded_ > l; };
  mu_.Await(ready);
  tm_.load_wait_s += SecondsSince(t0);
  if (loaded_ > l) return absl::OkStatus();
  return load_status_.ok() ? absl::AbortedError("blend: loading stopped") : load_status_;
}

void BlendRun::MarkConsumed(int l) {
  if (!threaded_) return;
  MutexLock lock(&mu_);
  consumed_ = l + 1;
}

void BlendRun::FinishLoader(bool failed) {
  if (!threaded_) return;
  {
    MutexLock lock(&mu_);
    if (failed) stop_ = true;
  }
  loader_.join();
}

absl::Status BlendRun::LoadStatus() {
  MutexLock lock(&mu_);
  return load_status_;
}

absl::Status BlendRun::Compute() {
  RecomputeState s;
  s.ws = ws_;
  // Initial row set S (sorted positions).
  for (int64_t t = 0; t < N_; ++t) {
    const uint8_t c = plan_.row_class[t];
    if (c == internal::kForced || (c == kSelectable && plan_.blend_from_layer0)) {
      s.rows.push_back(static_cast<int32_t>(t));
    }
  }
  s.hidden.resize(s.rows.size() * dim_);
  RETURN_IF_ERROR(EmbedRows(&s));
  result_.recomputed.assign(L_, {});
  size_t next_check = 0;
  for (int l = 0; l < L_; ++l) {
    RETURN_IF_ERROR(WaitLayer(l));
    const Clock::time_point t_layer = Clock::now();
    bool probed = false;  // this layer's probe wrote fresh K/V of the kept candidates
    // Check layer: probe, rank, shrink the row set.
    if (next_check < plan_.schedule.size() && plan_.schedule[next_check].layer == l) {
      const CheckLayer& check = plan_.schedule[next_check++];
      RETURN_IF_ERROR(SelectRows(l, check, &s, &probed));
    }
    RETURN_IF_ERROR(ForwardRows(l, probed, &s));
    tm_.layer_compute_s[l] = SecondsSince(t_layer);
    MarkConsumed(l);
  }
  return ComputeLogits(&s);
}

absl::Status BlendRun::EmbedRows(RecomputeState* s) {
  const Clock::time_point t0 = Clock::now();
  std::vector<int32_t> toks(s->rows.size());
  for (size_t i = 0; i < s->rows.size(); ++i) toks[i] = plan_.tokens[s->rows[i]];
  RETURN_IF_ERROR(m_.Embed(toks, TensorView::Contiguous(
                                     s->hidden.data(), DType::kF32,
                                     {static_cast<int64_t>(s->rows.size()), dim_})));
  tm_.embed_s = SecondsSince(t0);
  return absl::OkStatus();
}

absl::Status BlendRun::SelectRows(int l, const CheckLayer& check, RecomputeState* s,
                                  bool* probed) {
  const Clock::time_point t0 = Clock::now();
  s->cand_idx.clear();
  s->cand_pos.clear();
  for (size_t i = 0; i < s->rows.size(); ++i) {
    if (plan_.row_class[s->rows[i]] == kSelectable) {
      s->cand_idx.push_back(static_cast<int32_t>(i));
      s->cand_pos.push_back(s->rows[i]);
    }
  }
  const int64_t nc = static_cast<int64_t>(s->cand_idx.size());
  int64_t want = WantRows(check.ratio, nc);
  if (want < nc || adaptive_pending_) {
    const KvPlane pk = Plane(l, true), pv = Plane(l, false);
    const Selector sel = options_.selector;
    const bool probe = adaptive_pending_ || sel == Selector::kDeviation ||
                       sel == Selector::kDeviationAttention ||
                       sel == Selector::kAttendedDeviation || sel == Selector::kLookaheadDeviation;
    if (probe) {
      RETURN_IF_ERROR(ProbeCandidates(l, pk, pv, s));
      RETURN_IF_ERROR(ScoreCandidates(s));
    } else {
      s->dev.assign(nc, 0.0f);
    }
    // The adaptive ratio's unit: the estimated error (deviation x the
    // query's attention), whichever selector ranks the rows.
    std::vector<float> err;
    if (adaptive_pending_) RETURN_IF_ERROR(AdaptiveErrorBase(s, &err));
    RETURN_IF_ERROR(ScoreBySelector(l, pk, s, adaptive_pending_ ? &err : nullptr));
    if (adaptive_pending_) {
      ChooseAdaptiveRatio(s->dev, err);
      want = WantRows(check.ratio, nc);
    }
    s->top.resize(want);
    RETURN_IF_ERROR(kernels::TopK(s->dev.data(), nc, want, s->top.data()));
    const Clock::time_point ts = Clock::now();
    if (probe && options_.scatter_probe_kv) {
      ScatterKv(s->fk.data(), s->cand_pos, pk);
      ScatterKv(s->fv.data(), s->cand_pos, pv);
      *probed = true;
    }
    CompactRows(s);
    tm_.merge_s += SecondsSince(ts);
  }
  tm_.selection_s += SecondsSince(t0);
  return absl::OkStatus();
}

absl::Status BlendRun::ProbeCandidates(int l, const KvPlane& pk, const KvPlane& pv,
                                       RecomputeState* s) {
  const int64_t nc = static_cast<int64_t>(s->cand_idx.size());
  const Clock::time_point tg = Clock::now();
  s->probe_h.resize(nc * dim_);
  GatherRows(s->hidden.data(), dim_, s->cand_idx, s->probe_h.data());
  s->ck.resize(kvh_ * nc * hd_);
  s->cv.resize(kvh_ * nc * hd_);
  GatherKv(pk, s->cand_pos, s->ck.data());
  GatherKv(pv, s->cand_pos, s->cv.data());
  tm_.merge_s += SecondsSince(tg);
  s->fk.resize(kvh_ * nc * hd_);
  s->fv.resize(kvh_ * nc * hd_);
  return m_.ProjectKV(
      l, TensorView::Contiguous(s->probe_h.data(), DType::kF32, {nc, dim_}), s->cand_pos.data(),
      CandView(s->fk, nc), CandView(s->fv, nc), s->ws);
}

absl::Status BlendRun::ScoreCandidates(RecomputeState* s) {
  const int64_t nc = static_cast<int64_t>(s->cand_idx.size());
  const TensorView fkv = CandView(s->fk, nc);
  const TensorView fvv = CandView(s->fv, nc);
  s->dev.assign(nc, 0.0f);
  if (options_.deviation != Deviation::kValue) {
    RETURN_IF_ERROR(kernels::KvDeviation(fkv, CandView(s->ck, nc), s->dev.data()));
  }
  if (options_.deviation == Deviation::kBoth) {
    // K and V live on different scales: sum them each normalized by
    // its mean over the candidates, so neither drowns the other.
    s->dev_v.assign(nc, 0.0f);
    RETURN_IF_ERROR(kernels::KvDeviation(fvv, CandView(s->cv, nc), s->dev_v.data()));
    internal::AddMeanNormalized(s->dev_v.data(), nc, s->dev.data());
  } else if (options_.deviation == Deviation::kValue) {
    RETURN_IF_ERROR(kernels::KvDeviation(fvv, CandView(s->cv, nc), s->dev.data()));
  }
  return absl::OkStatus();
}

absl::Status BlendRun::AdaptiveErrorBase(RecomputeState* s, std::vector<float>* err) {
  if (options_.adaptive_threshold <= 0 && options_.recompute_budget == nullptr) {
    *err = s->dev;
    return absl::OkStatus();
  }
  const int64_t nc = static_cast<int64_t>(s->cand_idx.size());
  err->assign(nc, 0.0f);
  RETURN_IF_ERROR(internal::RelativeDeviation(CandView(s->fk, nc), CandView(s->ck, nc),
                                              CandView(s->fv, nc), CandView(s->cv, nc),
                                              err->data()));
  // x the attention mass later (ScoreBySelector); / (query rows x heads)
  // here, so that the product is a mean attention probability.
  const double heads =
      static_cast<double>(std::max<int64_t>(1, plan_.query_tokens)) * cfg_.n_heads;
  for (float& x : *err) x = static_cast<float>(x / heads);
  return absl::OkStatus();
}

int64_t BlendRun::WantRows(double ratio, int64_t nc) const {
  const double r = std::min(1.0, ratio * ratio_scale_);
  return static_cast<int64_t>(
      RowsKept(r, static_cast<double>(plan_.selectable), static_cast<double>(nc)));
}

void BlendRun::ChooseAdaptiveRatio(const std::vector<float>& score,
                                   const std::vector<float>& err) {
  adaptive_pending_ = false;
  const BlendOptions& o = options_;
  const int64_t k = internal::AdaptiveCount(
      {o.recompute_budget, o.adaptive_threshold, o.adaptive_mass, o.adaptive_min, o.ratio}, score,
      err, plan_.selectable);
  const double sel = std::max<double>(1, static_cast<double>(plan_.selectable));
  const double r = std::clamp(static_cast<double>(k) / sel, options_.adaptive_min, options_.ratio);
  ratio_scale_ = options_.ratio > 0 ? r / options_.ratio : 0;
  result_.applied_ratio = r;
}

absl::Status BlendRun::ScoreBySelector(int l, const KvPlane& pk, RecomputeState* s,
                                       std::vector<float>* err) {
  const int64_t nc = static_cast<int64_t>(s->cand_idx.size());
  const Selector sel = options_.selector;
  if (sel == Selector::kChunkHead) {
    internal::ChunkHeadScores(s->cand_pos, plan_.seg_offset, s->dev.data());
  }
  const bool wants_attention = sel != Selector::kDeviation && sel != Selector::kChunkHead;
  if (!wants_attention && err == nullptr) return absl::OkStatus();
  // After the look-ahead has run, a check below the last layer weighs by
  // its mass alone: the check layer's own attention is not needed.
  if (sel == Selector::kLookaheadDeviation && err == nullptr && lookahead_.ran() && l + 1 < L_) {
    return LookaheadScores(l, {}, s);
  }
  std::vector<float> att;
  RETURN_IF_ERROR(QueryAttention(l, pk, s, &att));
  if (att.empty()) return absl::OkStatus();  // no query in the blend: deviation alone
  if (err != nullptr) internal::MultiplyBy(att.data(), nc, err->data());
  switch (sel) {
    case Selector::kQueryAttention: s->dev = std::move(att); break;
    case Selector::kAttendedDeviation: internal::MultiplyBy(att.data(), nc, s->dev.data()); break;
    case Selector::kLookaheadDeviation: RETURN_IF_ERROR(LookaheadScores(l, att, s)); break;
    case Selector::kDeviationAttention:
      internal::AddMeanNormalized(att.data(), nc, s->dev.data());
      break;
    case Selector::kDeviation:
    case Selector::kChunkHead: break;  // their scores need no attention
  }
  return absl::OkStatus();
}

void BlendRun::QueryInputs(const RecomputeState& s, std::vector<int32_t>* pos,
                           std::vector<float>* hidden) const {
  std::vector<int32_t> idx;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    if (s.rows[i] < plan_.query_begin) continue;
    idx.push_back(static_cast<int32_t>(i));
    pos->push_back(s.rows[i]);
  }
  hidden->resize(idx.size() * dim_);
  GatherRows(s.hidden.data(), dim_, idx, hidden->data());
}

absl::Status BlendRun::QueryAttention(int l, const KvPlane& pk, RecomputeState* s,
                                      std::vector<float>* att) {
  std::vector<int32_t> qpos;
  std::vector<float> qh;
  QueryInputs(*s, &qpos, &qh);
  att->clear();
  const int64_t nq = static_cast<int64_t>(qpos.size());
  if (nq == 0) return absl::OkStatus();
  const int64_t qd = cfg_.q_dim();
  std::vector<float> q(nq * qd);
  att->resize(s->cand_idx.size());
  RETURN_IF_ERROR(m_.ProjectQ(l, TensorView::Contiguous(qh.data(), DType::kF32, {nq, dim_}),
                              qpos.data(), TensorView::Contiguous(q.data(), DType::kF32, {nq, qd}),
                              s->ws));
  return internal::QueryAttentionScores(
      q.data(), qpos, cfg_.n_heads, {pk.data, pk.head_stride, pk.head_dim, pk.kv_heads},
      {cfg_.attn_scale, cfg_.Window(l)}, plan_.query_begin, s->cand_pos, att->data());
}

absl::Status BlendRun::LookaheadScores(int l, const std::vector<float>& att, RecomputeState* s) {
  if (!lookahead_.ran() || lookahead_.reached() < l) {  // past its reach: anew from l
    std::vector<int32_t> qpos;
    std::vector<float> qh;
    QueryInputs(*s, &qpos, &qh);
    RETURN_IF_ERROR(lookahead_.Run(
        m_, l, std::move(qh), qpos, kv_, N_, plan_.query_begin, s->cand_pos, options_.causal,
        [this](int layer) { return WaitLayer(layer); }, s->ws, options_.lookahead_layers));
  }
  RETURN_IF_ERROR(lookahead_.LookFrom(l, s->ws));
  lookahead_.Weigh(l, att, s->cand_pos, s->dev.data());
  return absl::OkStatus();
}

void BlendRun::CompactRows(RecomputeState* s) {
  // Compact rows/hidden in place, keeping forced rows and the top set.
  std::vector<int32_t>& rows = s->rows;
  std::vector<float>& hidden = s->hidden;
  std::vector<uint8_t>& keep = s->keep;
  keep.assign(rows.size(), 1);
  for (int32_t ci : s->cand_idx) keep[ci] = 0;
  for (int32_t t : s->top) keep[s->cand_idx[t]] = 1;
  size_t w = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!keep[i]) continue;
    if (w != i) {
      rows[w] = rows[i];
      std::memmove(hidden.data() + w * dim_, hidden.data() + i * dim_, dim_ * sizeof(float));
    }
    ++w;
  }
  rows.resize(w);
  hidden.resize(w * dim_);
}

absl::Status BlendRun::ForwardRows(int l, bool probed, RecomputeState* s) {
  // Forward the selected rows.
  const Clock::time_point tf = Clock::now();
  model::LayerOptions lo;
  lo.causal = options_.causal;
  const int64_t nr = static_cast<int64_t>(s->rows.size());
  // Selectable rows whose K/V in the cache are already what this layer
  // would compute: layer 0 (loaded + re-rotated), or just probed.
  if (options_.reuse_exact_kv && (l == 0 || probed)) {
    s->kv_in_cache.resize(nr);
    for (int64_t i = 0; i < nr; ++i) {
      s->kv_in_cache[i] = plan_.row_class[s->rows[i]] == kSelectable;
    }
    lo.kv_in_cache = s->kv_in_cache.data();
  }
  RETURN_IF_ERROR(m_.ForwardLayer(
      l, TensorView::Contiguous(s->hidden.data(), DType::kF32, {nr, dim_}), s->rows.data(),
      kv_.Layer(l, N_), lo, s->ws));
  (l == 0 ? tm_.layer0_s : tm_.recompute_s) += SecondsSince(tf);
  result_.recomputed[l] = s->rows;
  if (options_.on_layer_done) {
    RETURN_IF_ERROR(options_.on_layer_done(l, kv_, result_.recomputed[l]));
  }
  return absl::OkStatus();
}

absl::Status BlendRun::ComputeLogits(RecomputeState* s) {
  // Logits of the query rows: the last query_tokens rows of the (sorted) set.
  if (options_.logits == QueryLogits::kNone) return absl::OkStatus();
  const Clock::time_point t0 = Clock::now();
  const int64_t n = static_cast<int64_t>(s->rows.size());
  const int64_t lr = options_.logits == QueryLogits::kAll ? plan_.query_tokens : 1;
  if (n < lr || s->rows[n - lr] != plan_.total - lr) {
    return absl::InternalError("blend: query rows missing from the recompute set");
  }
  result_.logits.resize(lr * cfg_.vocab_size);
  RETURN_IF_ERROR(m_.FinalNormAndLogits(
      TensorView::Contiguous(s->hidden.data() + (n - lr) * dim_, DType::kF32, {lr, dim_}),
      TensorView::Contiguous(result_.logits.data(), DType::kF32, {lr, cfg_.vocab_size}),
      s->ws));
  result_.logits_rows = lr;
  tm_.logits_s = SecondsSince(t0);
  return absl::OkStatus();
}

// FinishResult: copies the plan's layout, selectable count and applied
// schedule into the result.
void FinishResult(const Plan& plan, BlendResult* result) {
  result->total_tokens = plan.total;
  result->query_begin = plan.query_begin;
  result->query_tokens = plan.query_tokens;
  result->selectable_tokens = plan.selectable;
  result->schedule = plan.schedule;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Blender>> Blender::Create(const Options& options) {
  if (options.model == nullptr) return absl::InvalidArgumentError("Blender: model is required");
  return std::unique_ptr<Blender>(new Blender(options.model));
}

Blender::Blender(const model::Model* model)
    : model_(model),
      idle_ws_({.max_items = kMaxKeptWorkspaces, .max_item_bytes = kMaxKeptWorkspaceBytes}) {}

std::unique_ptr<model::Workspace> Blender::AcquireWorkspace() const {
  // Any kept one (the smallest): it grows to what this blend needs.
  std::optional<std::unique_ptr<model::Workspace>> ws = idle_ws_.Take(0);
  return ws ? std::move(*ws) : std::make_unique<model::Workspace>();
}

void Blender::ReleaseWorkspace(std::unique_ptr<model::Workspace> ws) const {
  // A long prompt's scratch is not kept (it would hold its peak for good),
  // nor a fifth one.
  const size_t bytes = ws->bytes();
  idle_ws_.Put(std::move(ws), bytes);
}

absl::StatusOr<BlendResult> Blender::Blend(absl::Span<const BlendSegment> segments,
                                           const BlendOptions& options) const {
  const Clock::time_point t_start = Clock::now();
  const model::Model& m = *model_;
  // Plan: validated segment layout, row classes and check layers.
  ASSIGN_OR_RETURN(Plan plan, internal::MakePlan(segments, options, m));
  ASSIGN_OR_RETURN(BlendResult result, NewResult(m.config(), plan, options));
  absl::Status status;
  std::unique_ptr<model::Workspace> ws = AcquireWorkspace();
  {
    // Load (this thread or a loader thread) and recompute, layer by layer.
    BlendRun run(m, segments, options, plan, result, ws.get());
    status = run.Run();
  }  // the loader thread has stopped writing the cache
  ReleaseWorkspace(std::move(ws));
  if (!status.ok()) {
    if (options.cache_pool != nullptr) options.cache_pool->Release(std::move(result.cache));
    return status;
  }
  // Finish: result layout and total time.
  FinishResult(plan, &result);
  result.timings.total_s = SecondsSince(t_start);
  return result;
}

}  // namespace ragkv::blend
