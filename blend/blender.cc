#include "blend/blender.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "kernels/deviation.h"
#include "kernels/rope.h"

namespace ragkv::blend {

using kernels::DType;
using kernels::TensorView;

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

enum RowClass : uint8_t {
  kExactRow = 0,    // cached at its original offset 0: never recomputed
  kSelectable = 1,  // cached elsewhere: recomputed if selected
  kForced = 2,      // query, missed chunk, or forced by the strategy
};

// Plan: the validated request laid out over positions.
struct Plan {
  int64_t total = 0;
  int64_t query_begin = 0;
  int64_t query_tokens = 0;
  int64_t selectable = 0;
  std::vector<int32_t> tokens;      // [total]
  std::vector<uint8_t> row_class;   // [total]
  std::vector<int64_t> seg_offset;  // per segment
  std::vector<int> load_segments;   // segments whose cached KV is read
  std::vector<CheckLayer> schedule;
  bool blend_from_layer0 = false;   // selectable rows are recomputed at layer 0
};

bool ValidRatio(double r) { return std::isfinite(r) && r >= 0.0 && r <= 1.0; }

absl::Status CheckSource(const ChunkInfo& info, const model::Model& model, size_t seg,
                         size_t tokens) {
  const model::ModelConfig& cfg = model.config();
  if (info.fingerprint != model.fingerprint()) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ", seg, ": cached KV has fingerprint ",
                     model::FingerprintHex(info.fingerprint), ", model is ",
                     model.fingerprint_hex()));
  }
  if (info.num_layers != cfg.n_layers || info.kv_heads != cfg.n_kv_heads ||
      info.head_dim != cfg.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment ", seg, ": cached KV layout layers=", info.num_layers, " kv_heads=",
        info.kv_heads, " head_dim=", info.head_dim, " disagrees with the model (layers=",
        cfg.n_layers, " kv_heads=", cfg.n_kv_heads, " head_dim=", cfg.head_dim, ")"));
  }
  if (info.dtype != cfg.kv_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment ", seg, ": cached KV dtype ", kernels::DTypeName(info.dtype),
        " disagrees with the model's KV dtype ", kernels::DTypeName(cfg.kv_dtype)));
  }
  if (info.num_tokens != static_cast<int64_t>(tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("segment ", seg, ": cached KV holds ",
                                                   info.num_tokens, " tokens, segment has ",
                                                   tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> MakePlan(absl::Span<const BlendSegment> segments,
                              const BlendOptions& options, const model::Model& model) {
  const model::ModelConfig& cfg = model.config();
  if (!ValidRatio(options.ratio)) {
    return absl::InvalidArgumentError(
        absl::StrCat("blend ratio must be in [0, 1], got ", options.ratio));
  }
  if (options.extra_capacity_tokens < 0) {
    return absl::InvalidArgumentError("extra_capacity_tokens must be >= 0");
  }
  if (options.overlap_loading && options.prefetch_layers < 1) {
    return absl::InvalidArgumentError("prefetch_layers must be >= 1");
  }
  Plan p;
  size_t chunks = 0;
  bool has_query = false;
  for (size_t i = 0; i < segments.size(); ++i) {
    const BlendSegment& s = segments[i];
    if (s.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat("segment ", i, " is empty"));
    if (has_query) return absl::InvalidArgumentError("the query must be the last segment");
    switch (s.kind) {
      case SegmentKind::kPrefix:
        if (i != 0) return absl::InvalidArgumentError("the system prefix must be the first segment");
        break;
      case SegmentKind::kChunk:
        ++chunks;
        break;
      case SegmentKind::kQuery:
        if (s.kv != nullptr) return absl::InvalidArgumentError("the query cannot have cached KV");
        has_query = true;
        break;
    }
    if (s.kv != nullptr) RETURN_IF_ERROR(CheckSource(s.kv->info(), model, i, s.tokens.size()));
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= cfg.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("segment ", i, ": token id ", t, " outside [0, ", cfg.vocab_size, ")"));
      }
    }
    p.seg_offset.push_back(p.total);
    p.total += static_cast<int64_t>(s.tokens.size());
  }
  if (chunks == 0) return absl::InvalidArgumentError("blend: empty chunk list");
  if (!has_query) return absl::InvalidArgumentError("blend: no query segment");
  if (p.total > cfg.max_seq_len) {
    return absl::OutOfRangeError(absl::StrCat("blend: prompt of ", p.total,
                                              " tokens exceeds the model context of ",
                                              cfg.max_seq_len));
  }

  // Schedule.
  if (options.strategy == Strategy::kCacheBlend) {
    p.schedule = options.schedule.empty() ? MakeSchedule(options, cfg.n_layers) : options.schedule;
    int prev = -1;
    for (const CheckLayer& c : p.schedule) {
      if (!ValidRatio(c.ratio)) {
        return absl::InvalidArgumentError(
            absl::StrCat("check layer ", c.layer, ": ratio ", c.ratio, " outside [0, 1]"));
      }
      if (c.layer <= prev || c.layer < 0 || c.layer >= cfg.n_layers) {
        return absl::InvalidArgumentError(absl::StrCat(
            "check layers must increase within [0, ", cfg.n_layers, "), got ", c.layer));
      }
      prev = c.layer;
    }
  }

  // Row classes.
  p.tokens.reserve(p.total);
  p.row_class.assign(p.total, kForced);
  for (size_t i = 0; i < segments.size(); ++i) {
    const BlendSegment& s = segments[i];
    p.tokens.insert(p.tokens.end(), s.tokens.begin(), s.tokens.end());
    if (s.kind == SegmentKind::kQuery) {
      p.query_begin = p.seg_offset[i];
      p.query_tokens = static_cast<int64_t>(s.tokens.size());
    }
    if (s.kv == nullptr) continue;
    const bool exact = p.seg_offset[i] == 0;
    uint8_t cls = kForced;
    switch (options.strategy) {
      case Strategy::kFullPrefill:
        continue;  // nothing is loaded
      case Strategy::kPrefixReuse:
        if (!exact) continue;
        cls = kExactRow;
        break;
      case Strategy::kFullReuse:
      case Strategy::kCacheBlend:
        cls = exact ? kExactRow : kSelectable;
        break;
    }
    p.load_segments.push_back(static_cast<int>(i));
    const int64_t end = p.seg_offset[i] + static_cast<int64_t>(s.tokens.size());
    for (int64_t t = p.seg_offset[i]; t < end; ++t) p.row_class[t] = cls;
    if (cls == kSelectable && options.strategy == Strategy::kCacheBlend) {
      const int64_t head = std::min<int64_t>(std::max(0, options.chunk_head_tokens),
                                             end - p.seg_offset[i]);
      for (int64_t t = p.seg_offset[i]; t < p.seg_offset[i] + head; ++t) p.row_class[t] = kForced;
    }
    for (int64_t t = p.seg_offset[i]; t < end; ++t) p.selectable += p.row_class[t] == kSelectable;
  }
  p.blend_from_layer0 = options.strategy == Strategy::kCacheBlend && options.ratio > 0;
  if (options.strategy == Strategy::kCacheBlend && options.ratio == 0) p.schedule.clear();
  return p;
}

// Gathers rows `idx` of the [rows, dim] matrix src into dst [idx.size(), dim].
void GatherRows(const float* src, int64_t dim, absl::Span<const int32_t> idx, float* dst) {
  for (size_t i = 0; i < idx.size(); ++i) {
    std::memcpy(dst + i * dim, src + static_cast<int64_t>(idx[i]) * dim, dim * sizeof(float));
  }
}

// KvPlane: one layer's K or V plane of the fused cache, [kv_heads][capacity][hd].
struct KvPlane {
  float* data;
  int64_t head_stride;
  int64_t head_dim;
  int kv_heads;
};

// Gathers positions `pos` of a plane into dst [kv_heads, pos.size(), hd].
void GatherKv(const KvPlane& p, absl::Span<const int32_t> pos, float* dst) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int h = 0; h < p.kv_heads; ++h) {
    const float* src = p.data + h * p.head_stride;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + (h * n + i) * p.head_dim, src + pos[i] * p.head_dim,
                  p.head_dim * sizeof(float));
    }
  }
}

// Scatters src [kv_heads, pos.size(), hd] into the plane at positions `pos`.
void ScatterKv(const float* src, absl::Span<const int32_t> pos, const KvPlane& p) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int h = 0; h < p.kv_heads; ++h) {
    float* dst = p.data + h * p.head_stride;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + pos[i] * p.head_dim, src + (h * n + i) * p.head_dim,
                  p.head_dim * sizeof(float));
    }
  }
}

}  // namespace

const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kCacheBlend: return "cacheblend";
    case Strategy::kFullPrefill: return "full-prefill";
    case Strategy::kFullReuse: return "full-reuse";
    case Strategy::kPrefixReuse: return "prefix-reuse";
  }
  return "?";
}

std::vector<CheckLayer> MakeSchedule(const BlendOptions& options, int n_layers) {
  std::vector<CheckLayer> out;
  const double r = std::clamp(options.ratio, 0.0, 1.0);
  if (r <= 0) return out;
  const int first = std::max(0, options.first_check_layer);
  if (options.filtering == Filtering::kSingleCheck || options.gradual_steps <= 1) {
    if (first < n_layers) out.push_back({first, r});
    return out;
  }
  const int steps = options.gradual_steps;
  const double r1 = std::min(1.0, std::max(r, r * options.gradual_first_factor));
  for (int i = 0; i < steps; ++i) {
    const int layer = first + i;
    if (layer >= n_layers) break;
    // Geometric interpolation r1 -> r over the steps.
    const double t = static_cast<double>(i) / (steps - 1);
    out.push_back({layer, r1 * std::pow(r / r1, t)});
  }
  if (!out.empty()) out.back().ratio = r;
  return out;
}

absl::StatusOr<std::unique_ptr<Blender>> Blender::Create(const Options& options) {
  if (options.model == nullptr) return absl::InvalidArgumentError("Blender: model is required");
  return std::unique_ptr<Blender>(new Blender(options.model));
}

absl::StatusOr<BlendResult> Blender::Blend(absl::Span<const BlendSegment> segments,
                                           const BlendOptions& options) const {
  const Clock::time_point t_start = Clock::now();
  const model::Model& m = *model_;
  const model::ModelConfig& cfg = m.config();
  ASSIGN_OR_RETURN(Plan plan, MakePlan(segments, options, m));

  const int L = cfg.n_layers;
  const int64_t N = plan.total;
  const int64_t capacity = N + options.extra_capacity_tokens;
  const int64_t dim = cfg.dim;
  const int64_t hd = cfg.head_dim;
  const int kvh = cfg.n_kv_heads;
  ASSIGN_OR_RETURN(model::KVCache cache, model::KVCache::Create(cfg, capacity));
  RETURN_IF_ERROR(cache.set_num_tokens(N));
  BlendResult result(std::move(cache));
  model::KVCache& kv = result.cache;
  StageTimings& tm = result.timings;
  tm.layer_compute_s.assign(L, 0.0);
  tm.layer_load_s.assign(L, 0.0);

  auto plane = [&](int l, bool key) {
    return KvPlane{key ? kv.k_data(l) : kv.v_data(l), capacity * hd, hd, kvh};
  };

  // ---- loading (this thread or a loader thread) ----------------------------
  kernels::RopeParams rope;
  rope.head_dim = cfg.head_dim;
  rope.theta = cfg.rope_theta;
  rope.layout = cfg.rope_layout;
  double load_s = 0, rerotate_s = 0;
  auto load_layer = [&](int l) -> absl::Status {
    const Clock::time_point t0 = Clock::now();
    for (int si : plan.load_segments) {
      const int64_t off = plan.seg_offset[si];
      const int64_t T = static_cast<int64_t>(segments[si].tokens.size());
      TensorView dk, dv;
      for (TensorView* v : {&dk, &dv}) {
        v->dtype = DType::kF32;
        v->rank = 3;
        v->shape[0] = kvh;
        v->shape[1] = T;
        v->shape[2] = hd;
        v->stride[0] = capacity * hd;
        v->stride[1] = hd;
        v->stride[2] = 1;
      }
      dk.data = kv.k_data(l) + off * hd;
      dv.data = kv.v_data(l) + off * hd;
      const Clock::time_point ta = Clock::now();
      if (absl::Status st = segments[si].kv->ReadLayer(l, dk, dv); !st.ok()) {
        // Keep the code (DataLoss = recompute that chunk), name the segment.
        return absl::Status(st.code(), absl::StrCat("blend: segment ", si, " layer ", l, ": ",
                                                    st.message()));
      }
      load_s += Seconds(ta);
      if (off != 0) {
        const Clock::time_point tb = Clock::now();
        RETURN_IF_ERROR(kernels::RerotateKeys(dk, off, rope));
        rerotate_s += Seconds(tb);
      }
    }
    tm.layer_load_s[l] = Seconds(t0);
    return absl::OkStatus();
  };

  const bool need_load = !plan.load_segments.empty();
  const bool threaded = need_load && options.overlap_loading && L > 1;
  absl::Mutex mu;
  int loaded = 0;     // layers [0, loaded) are in the cache
  int consumed = 0;   // layers [0, consumed) are done computing
  bool stop = false;  // compute failed: loader must exit
  absl::Status load_status;
  std::thread loader;
  if (threaded) {
    loader = std::thread([&] {
      for (int l = 0; l < L; ++l) {
        {
          absl::MutexLock lock(&mu);
          auto can_go = [&] { return stop || l < consumed + options.prefetch_layers; };
          mu.Await(absl::Condition(&can_go));
          if (stop) return;
        }
        absl::Status st = load_layer(l);
        absl::MutexLock lock(&mu);
        if (!st.ok()) {
          load_status = st;
          stop = true;
          return;
        }
        loaded = l + 1;
      }
    });
  }
  auto wait_layer = [&](int l) -> absl::Status {
    if (!need_load) return absl::OkStatus();
    if (!threaded) return load_layer(l);
    const Clock::time_point t0 = Clock::now();
    absl::MutexLock lock(&mu);
    auto ready = [&] { return stop || loaded > l; };
    mu.Await(absl::Condition(&ready));
    tm.load_wait_s += Seconds(t0);
    if (loaded > l) return absl::OkStatus();
    return load_status.ok() ? absl::AbortedError("blend: loading stopped") : load_status;
  };
  auto finish_loader = [&](bool failed) {
    if (!threaded) return;
    {
      absl::MutexLock lock(&mu);
      if (failed) stop = true;
    }
    loader.join();
  };

  // ---- compute -------------------------------------------------------------
  auto compute = [&]() -> absl::Status {
    model::Workspace ws;
    // Initial row set S (sorted positions).
    std::vector<int32_t> rows;
    for (int64_t t = 0; t < N; ++t) {
      const uint8_t c = plan.row_class[t];
      if (c == kForced || (c == kSelectable && plan.blend_from_layer0)) {
        rows.push_back(static_cast<int32_t>(t));
      }
    }
    std::vector<float> hidden(rows.size() * dim);
    {
      const Clock::time_point t0 = Clock::now();
      std::vector<int32_t> toks(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) toks[i] = plan.tokens[rows[i]];
      RETURN_IF_ERROR(m.Embed(toks, TensorView::Contiguous(
                                        hidden.data(), DType::kF32,
                                        {static_cast<int64_t>(rows.size()), dim})));
      tm.embed_s = Seconds(t0);
    }
    result.recomputed.assign(L, {});
    std::vector<float> probe_h, fk, fv, ck, cv, dev, dev_v;
    std::vector<int32_t> cand_idx, cand_pos, top;
    std::vector<uint8_t> keep, kv_in_cache;
    size_t next_check = 0;
    for (int l = 0; l < L; ++l) {
      RETURN_IF_ERROR(wait_layer(l));
      const Clock::time_point t_layer = Clock::now();
      const KvPlane pk = plane(l, true), pv = plane(l, false);
      bool probed = false;  // this layer's probe wrote fresh K/V of the kept candidates
      // Check layer: probe, rank, shrink the row set.
      if (next_check < plan.schedule.size() && plan.schedule[next_check].layer == l) {
        const CheckLayer& check = plan.schedule[next_check++];
        const Clock::time_point t0 = Clock::now();
        cand_idx.clear();
        cand_pos.clear();
        for (size_t i = 0; i < rows.size(); ++i) {
          if (plan.row_class[rows[i]] == kSelectable) {
            cand_idx.push_back(static_cast<int32_t>(i));
            cand_pos.push_back(rows[i]);
          }
        }
        const int64_t nc = static_cast<int64_t>(cand_idx.size());
        const int64_t want = std::min<int64_t>(
            nc, std::llround(check.ratio * static_cast<double>(plan.selectable)));
        if (want < nc) {
          const Clock::time_point tg = Clock::now();
          probe_h.resize(nc * dim);
          GatherRows(hidden.data(), dim, cand_idx, probe_h.data());
          ck.resize(kvh * nc * hd);
          cv.resize(kvh * nc * hd);
          GatherKv(pk, cand_pos, ck.data());
          GatherKv(pv, cand_pos, cv.data());
          tm.merge_s += Seconds(tg);
          fk.resize(kvh * nc * hd);
          fv.resize(kvh * nc * hd);
          const TensorView fkv = TensorView::Contiguous(fk.data(), DType::kF32, {kvh, nc, hd});
          const TensorView fvv = TensorView::Contiguous(fv.data(), DType::kF32, {kvh, nc, hd});
          RETURN_IF_ERROR(m.ProjectKV(
              l, TensorView::Contiguous(probe_h.data(), DType::kF32, {nc, dim}), cand_pos.data(),
              fkv, fvv, &ws));
          dev.assign(nc, 0.0f);
          if (options.deviation != Deviation::kValue) {
            RETURN_IF_ERROR(kernels::KvDeviation(
                fkv, TensorView::Contiguous(ck.data(), DType::kF32, {kvh, nc, hd}), dev.data()));
          }
          if (options.deviation == Deviation::kBoth) {
            // K and V live on different scales: sum them each normalized by
            // its mean over the candidates, so neither drowns the other.
            dev_v.assign(nc, 0.0f);
            RETURN_IF_ERROR(kernels::KvDeviation(
                fvv, TensorView::Contiguous(cv.data(), DType::kF32, {kvh, nc, hd}),
                dev_v.data()));
            double mk = 0, mv = 0;
            for (int64_t i = 0; i < nc; ++i) mk += dev[i], mv += dev_v[i];
            const float sk = mk > 0 ? static_cast<float>(nc / mk) : 1.0f;
            const float sv = mv > 0 ? static_cast<float>(nc / mv) : 1.0f;
            for (int64_t i = 0; i < nc; ++i) dev[i] = dev[i] * sk + dev_v[i] * sv;
          } else if (options.deviation == Deviation::kValue) {
            RETURN_IF_ERROR(kernels::KvDeviation(
                fvv, TensorView::Contiguous(cv.data(), DType::kF32, {kvh, nc, hd}), dev.data()));
          }
          top.resize(want);
          RETURN_IF_ERROR(kernels::TopK(dev.data(), nc, want, top.data()));
          const Clock::time_point ts = Clock::now();
          if (options.scatter_probe_kv) {
            ScatterKv(fk.data(), cand_pos, pk);
            ScatterKv(fv.data(), cand_pos, pv);
            probed = true;
          }
          // Compact rows/hidden in place, keeping forced rows and the top set.
          keep.assign(rows.size(), 1);
          for (int32_t ci : cand_idx) keep[ci] = 0;
          for (int32_t t : top) keep[cand_idx[t]] = 1;
          size_t w = 0;
          for (size_t i = 0; i < rows.size(); ++i) {
            if (!keep[i]) continue;
            if (w != i) {
              rows[w] = rows[i];
              std::memmove(hidden.data() + w * dim, hidden.data() + i * dim, dim * sizeof(float));
            }
            ++w;
          }
          rows.resize(w);
          hidden.resize(w * dim);
          tm.merge_s += Seconds(ts);
        }
        tm.selection_s += Seconds(t0);
      }
      // Forward the selected rows.
      const Clock::time_point tf = Clock::now();
      model::LayerOptions lo;
      lo.causal = options.causal;
      const int64_t nr = static_cast<int64_t>(rows.size());
      // Selectable rows whose K/V in the cache are already what this layer
      // would compute: layer 0 (loaded + re-rotated), or just probed.
      if (options.reuse_exact_kv && (l == 0 || probed)) {
        kv_in_cache.resize(nr);
        for (int64_t i = 0; i < nr; ++i) kv_in_cache[i] = plan.row_class[rows[i]] == kSelectable;
        lo.kv_in_cache = kv_in_cache.data();
      }
      RETURN_IF_ERROR(m.ForwardLayer(
          l, TensorView::Contiguous(hidden.data(), DType::kF32, {nr, dim}), rows.data(),
          kv.Layer(l, N), lo, &ws));
      (l == 0 ? tm.layer0_s : tm.recompute_s) += Seconds(tf);
      result.recomputed[l] = rows;
      if (options.on_layer_done) {
        RETURN_IF_ERROR(options.on_layer_done(l, kv, result.recomputed[l]));
      }
      tm.layer_compute_s[l] = Seconds(t_layer);
      if (threaded) {
        absl::MutexLock lock(&mu);
        consumed = l + 1;
      }
    }
    // Logits of the query rows: the last query_tokens rows of the (sorted) set.
    if (options.logits != QueryLogits::kNone) {
      const Clock::time_point t0 = Clock::now();
      const int64_t n = static_cast<int64_t>(rows.size());
      const int64_t lr = options.logits == QueryLogits::kAll ? plan.query_tokens : 1;
      if (n < lr || rows[n - lr] != plan.total - lr) {
        return absl::InternalError("blend: query rows missing from the recompute set");
      }
      result.logits.resize(lr * cfg.vocab_size);
      RETURN_IF_ERROR(m.FinalNormAndLogits(
          TensorView::Contiguous(hidden.data() + (n - lr) * dim, DType::kF32, {lr, dim}),
          TensorView::Contiguous(result.logits.data(), DType::kF32, {lr, cfg.vocab_size}),
          &ws));
      result.logits_rows = lr;
      tm.logits_s = Seconds(t0);
    }
    return absl::OkStatus();
  };

  absl::Status st = compute();
  finish_loader(!st.ok());
  if (!st.ok()) return st;
  if (!load_status.ok()) return load_status;
  tm.load_s = load_s;
  tm.rerotate_s = rerotate_s;
  result.total_tokens = N;
  result.query_begin = plan.query_begin;
  result.query_tokens = plan.query_tokens;
  result.selectable_tokens = plan.selectable;
  result.schedule = plan.schedule;
  tm.total_s = Seconds(t_start);
  return result;
}

}  // namespace ragkv::blend
