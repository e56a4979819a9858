#include "blend/loading_controller.h"

#include "blend/calibration.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"

namespace ragkv::blend {
namespace {

bool InUnit(double r) { return std::isfinite(r) && r >= 0 && r <= 1; }

HardwareSpec CpuSpec(double flops, const double bw[3], double overhead) {
  HardwareSpec h;
  h.name = "cpu-calibrated";
  h.peak_flops = flops;
  h.mem_bw = 0;  // measured throughput already includes memory effects
  h.ram_tier_bw = bw[static_cast<int>(Tier::kRam)];
  h.ssd_tier_bw = bw[static_cast<int>(Tier::kSsd)];
  h.remote_tier_bw = bw[static_cast<int>(Tier::kRemote)];
  h.layer_overhead_s = overhead;
  return h;
}

// Visible keys of rows at `positions` under the exact causal mask.
double VisibleKeys(absl::Span<const int32_t> positions) {
  double v = 0;
  for (int32_t p : positions) v += static_cast<double>(p) + 1;
  return v;
}

// MeasureFlops: effective FLOP/s of ForwardLayer for `rows` scattered rows.
absl::StatusOr<double> MeasureFlops(const model::Model& m, const ModelShape& shape,
                                    const ControllerOptions& o) {
  const auto& cfg = m.config();
  const int64_t kv_tokens =
      std::max<int64_t>(1, std::min<int64_t>(o.calibration_kv_tokens, cfg.max_seq_len));
  const int64_t rows = std::clamp<int64_t>(o.calibration_rows, 1, kv_tokens);
  ASSIGN_OR_RETURN(model::KVCache cache, m.NewCache(kv_tokens));
  RETURN_IF_ERROR(cache.set_num_tokens(kv_tokens));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int l = 0; l < 1; ++l) {
    const size_t n = static_cast<size_t>(cfg.n_kv_heads) * kv_tokens * cfg.head_dim;
    float* k = cache.k_data(l);
    float* v = cache.v_data(l);
    for (size_t i = 0; i < n; ++i) k[i] = nd(rng), v[i] = nd(rng);
  }
  std::vector<int32_t> pos(rows);
  for (int64_t r = 0; r < rows; ++r) pos[r] = static_cast<int32_t>((r * kv_tokens) / rows);
  std::vector<float> hidden(rows * cfg.dim);
  model::Workspace ws;
  CostModel cm(shape, CpuSpec(1, o.tier_bytes_per_s, 0));
  const double flops = cm.SelectiveLayer(rows, kv_tokens, VisibleKeys(pos)).flops;
  double best = 1e300;
  for (int run = 0; run < std::max(1, o.calibration_runs); ++run) {
    for (auto& x : hidden) x = nd(rng);
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(m.ForwardLayer(
        0, kernels::TensorView::Contiguous(hidden.data(), kernels::DType::kF32, {rows, cfg.dim}),
        pos.data(), cache.Layer(0, kv_tokens), model::LayerOptions{}, &ws));
    best = std::min(best, SecondsSince(t0));
  }
  return flops / std::max(best, 1e-9);
}

}  // namespace

ModelShape ShapeOf(const model::Model& model) {
  const auto& c = model.config();
  return ShapeOfConfig(c, c.arch, 4, static_cast<int>(kernels::DTypeSize(c.kv_dtype)));
}

absl::StatusOr<std::unique_ptr<LoadingController>> LoadingController::Create(
    const ControllerOptions& o) {
  if (o.model == nullptr) return absl::InvalidArgumentError("LoadingController: model is required");
  if (!InUnit(o.r_min) || !InUnit(o.r_max) || o.r_min > o.r_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadingController: need 0 <= r_min <= r_max <= 1, got ", o.r_min, ", ", o.r_max));
  }
  if (o.prefetch_layers < 1) return absl::InvalidArgumentError("prefetch_layers must be >= 1");
  for (double bw : o.tier_bytes_per_s) {
    if (!(bw >= 0) || !std::isfinite(bw)) {
      return absl::InvalidArgumentError("tier bandwidths must be finite and >= 0");
    }
  }
  ASSIGN_OR_RETURN(auto blender, Blender::Create({o.model}));
  ModelShape shape = ShapeOf(*o.model);
  double flops = o.recompute_flops_per_s;
  if (!(flops > 0)) {
    ASSIGN_OR_RETURN(flops, MeasureFlops(*o.model, shape, o));
  }
  std::unique_ptr<LoadingController> c(new LoadingController(o, shape, std::move(blender)));
  MutexLock lock(&c->mu_);
  c->flops_per_s_ = flops;
  for (int i = 0; i < 3; ++i) c->tier_bw_[i] = o.tier_bytes_per_s[i];
  return c;
}

CostModel LoadingController::CostModelSnapshot() const {
  MutexLock lock(&mu_);
  return CostModel(shape_, CpuSpec(flops_per_s_, tier_bw_, options_.layer_overhead_s));
}

double LoadingController::recompute_flops_per_s() const {
  MutexLock lock(&mu_);
  return flops_per_s_;
}

double LoadingController::tier_bytes_per_s(Tier tier) const {
  MutexLock lock(&mu_);
  return tier_bw_[static_cast<int>(tier)];
}

Decision LoadingController::Decide(int64_t context_tokens, int64_t query_tokens,
                                   const std::vector<Tier>& available) const {
  const CostModel cm = CostModelSnapshot();
  std::vector<Tier> known;
  for (Tier t : available) {
    if (cm.TierBandwidth(t) > 0) known.push_back(t);
  }
  if (known.empty()) {
    Decision d;
    d.ratio = options_.r_min;
    d.tier = available.empty() ? Tier::kRam : available.front();
    d.recompute_s_per_layer = cm.RecomputeSecondsPerLayer(context_tokens, query_tokens, d.ratio);
    d.why = available.empty() ? "no tier holds the chunks; r = r_min"
                              : "no loading bandwidth known for the available tiers; r = r_min";
    return d;
  }
  Decision d =
      ChooseRatioAndTier(cm, context_tokens, query_tokens, options_.r_min, options_.r_max, known);
  if (options_.blend.selector == Selector::kLookaheadDeviation) {
    ChooseLookahead(cm, context_tokens, query_tokens, options_.blend.lookahead_layers, &d);
  }
  d.why = absl::StrFormat("%s [calibration: recompute %.2f GFLOP/s]", d.why,
                          cm.hardware().peak_flops / 1e9);
  return d;
}

absl::StatusOr<ControlledBlend> LoadingController::Blend(
    absl::Span<const BlendSegment> segments, const std::vector<Tier>& available,
    std::function<absl::Status(int, const model::KVCache&, absl::Span<const int32_t>)>
        on_layer_done,
    model::KVCachePool* cache_pool) {
  int64_t context = 0, query = 0;
  for (const BlendSegment& s : segments) {
    (s.kind == SegmentKind::kQuery ? query : context) += static_cast<int64_t>(s.tokens.size());
  }
  Decision d = Decide(context, query, available);
  BlendOptions o = options_.blend;
  o.strategy = Strategy::kCacheBlend;
  o.ratio = d.ratio;
  if (!d.lookahead) o.selector = Selector::kAttendedDeviation;
  o.lookahead_layers = d.lookahead_layers;
  o.schedule.clear();
  o.overlap_loading = true;
  o.prefetch_layers = options_.prefetch_layers;
  o.on_layer_done = std::move(on_layer_done);
  o.cache_pool = cache_pool;
  ASSIGN_OR_RETURN(BlendResult r, blender_->Blend(segments, o));
  ObserveBlend(r);
  return ControlledBlend{std::move(d), std::move(r)};
}

void LoadingController::ObserveTierBandwidth(Tier tier, double bytes_per_s) {
  if (!(bytes_per_s > 0) || !std::isfinite(bytes_per_s)) return;
  MutexLock lock(&mu_);
  double& bw = tier_bw_[static_cast<int>(tier)];
  bw = bw > 0 ? (1 - options_.ewma_alpha) * bw + options_.ewma_alpha * bytes_per_s : bytes_per_s;
}

void LoadingController::ObserveBlend(const BlendResult& r) {
  const int L = static_cast<int>(r.recomputed.size());
  if (L == 0 || static_cast<int>(r.timings.layer_compute_s.size()) != L) return;
  const int first = r.schedule.empty() ? 1 : r.schedule.back().layer + 1;
  CostModel cm(shape_, CpuSpec(1, options_.tier_bytes_per_s, 0));
  double flops = 0, secs = 0;
  for (int l = std::max(1, first); l < L; ++l) {
    flops += cm.SelectiveLayer(static_cast<int64_t>(r.recomputed[l].size()), r.total_tokens,
                               VisibleKeys(r.recomputed[l]))
                 .flops;
    secs += r.timings.layer_compute_s[l];
  }
  if (!(secs > 0) || !(flops > 0)) return;
  MutexLock lock(&mu_);
  flops_per_s_ = (1 - options_.ewma_alpha) * flops_per_s_ + options_.ewma_alpha * (flops / secs);
}

}  // namespace ragkv::blend
