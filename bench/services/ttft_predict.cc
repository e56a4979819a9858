// ttft_predict.cc: the predictions of `ragkv bench ttft` (internal/ttft_internal.h):
// CPU calibration and tier probes, the raw and calibrated cost models, the
// rows of the matrix with their predictions, the quality deltas.
#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/blend/bench_quality.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/store_source.h"
#include "kernels/tensor.h"

namespace ragkv::services::ttft_internal {

using blend::CpuCeilings;
using blend::CpuHardwareSpec;
using blend::CpuMeasureOptions;
using blend::DescribeKernelRates;
using blend::MeasureCpu;
using blend::MedianCeilings;

namespace {

// ProbeTier: t's probe_* fields: one chunk of prompt 0 streamed through the
// real load path, and opening all of prompt 0's streams (cold for SSD).
// Errors: store reads, a probe chunk missing.
absl::Status ProbeTier(const model::Model& model, const blend::ModelShape& shape,
                       const Prompt& p0, const TierSetup& tiers, TierStore& ts) {
  TierStore* t = &ts;
  // Probe: stream one chunk through the real load path (open, read every
  // layer, decode to f32), cold for SSD.
  const auto& info_chunk = p0.chunks[0];
  std::vector<float> k(static_cast<size_t>(shape.kv_heads) * info_chunk.size() * shape.head_dim);
  std::vector<float> v(k.size());
  double best = 1e30, best_open = 1e30, best_read = 1e30;
  uint64_t bytes = 0;
  for (int r = 0; r < 2; ++r) {
    tiers.MakeCold(t);
    const double t0 = Now();
    ASSIGN_OR_RETURN(auto src, blend::StoreKvSource::Open(t->store.get(), p0.keys[0],
                                                          model.fingerprint()));
    if (src == nullptr) return absl::InternalError("bench ttft: probe chunk missing");
    const double t_open = Now();
    best_open = std::min(best_open, t_open - t0);
    const int64_t ntok = static_cast<int64_t>(info_chunk.size());
    for (int l = 0; l < shape.layers; ++l) {
      RETURN_IF_ERROR(src->ReadLayer(
          l,
          kernels::TensorView::Contiguous(k.data(), kernels::DType::kF32,
                                          {shape.kv_heads, ntok, shape.head_dim}),
          kernels::TensorView::Contiguous(v.data(), kernels::DType::kF32,
                                          {shape.kv_heads, ntok, shape.head_dim})));
    }
    best = std::min(best, Now() - t0);
    best_read = std::min(best_read, Now() - t_open);
    bytes = src->bytes_read();
  }
  // Opening, as a request does it: every chunk of a prompt in turn, each
  // Open starting a producer that streams its chunk while the next ones
  // open (so the opens share the CPU with that streaming); cold for SSD.
  // Per chunk, best of 2. The single open above (best_open) is reported.
  double best_all = 1e30;
  for (int r = 0; r < 2; ++r) {
    tiers.MakeCold(t);
    std::vector<std::unique_ptr<blend::StoreKvSource>> all;
    const double t0 = Now();
    for (const auto& key : p0.keys) {
      ASSIGN_OR_RETURN(auto src, blend::StoreKvSource::Open(t->store.get(), key,
                                                            model.fingerprint()));
      if (src == nullptr) return absl::InternalError("bench ttft: probe chunk missing");
      all.push_back(std::move(src));
    }
    best_all = std::min(best_all, Now() - t0);
  }
  // Bandwidth in the cost model's unit: KV bytes of the store's dtype.
  t->probe_bytes_per_s = static_cast<double>(bytes) / best;
  t->probe_single_open_s = best_open;
  t->probe_open_s = best_all / static_cast<double>(std::max<size_t>(1, p0.keys.size()));
  t->probe_read_bytes_per_s = static_cast<double>(bytes) / best_read;
  return absl::OkStatus();
}

// Predict: the cost model's prediction for one row's strategy.
blend::RequestPrediction Predict(const blend::CostModel& cm, const blend::RequestShape& rs,
                                 const std::string& strategy, blend::Tier tier, double ratio) {
  if (strategy == "full-prefill") return cm.PredictFullPrefill(rs);
  if (strategy == "prefix") return cm.PredictPrefix(rs, tier);
  if (strategy == "full-reuse") return cm.PredictBlend(rs, 0, tier);
  return cm.PredictBlend(rs, ratio, tier);
}

}  // namespace

// ---- Calibration: CPU ceilings, tier probes, prefill efficiency ----

absl::Status Calibrate(const TtftBenchOptions& o, const model::Model& model,
                       const std::string& work, const std::vector<Prompt>& prompts,
                       TierSetup& tiers, const PrefillBest& prefill, Calibration& cal,
                       TtftReport& rep) {
  cal.prefill = prefill;
  cal.shape = blend::ShapeOf(model);
  const blend::ModelShape& shape = cal.shape;
  cal.context_tokens = [&] {
    int64_t c = 0;
    for (const auto& ch : prompts[0].chunks) c += static_cast<int64_t>(ch.size());
    return c;
  }();
  const int64_t context_tokens = cal.context_tokens;
  cal.query_tokens = static_cast<int64_t>(prompts[0].query.size());
  const int64_t query_tokens = cal.query_tokens;
  // The kernels of one layer of this model, at this request's sizes: the
  // GEMM table spans 1 row (logits) to the whole prompt; attention over the
  // context; the allocation of this prompt's fused f32 cache.
  CpuMeasureOptions& cmo = cal.cmo;
  cmo = o.calibration;
  cmo.scratch_dir = work;
  cmo.model = shape;
  cmo.attention_keys = static_cast<int>(std::max<int64_t>(64, context_tokens));
  cmo.attention_rows = static_cast<int>(std::min<int64_t>(256, cmo.attention_keys));
  cmo.alloc_bytes = static_cast<size_t>(2) * shape.layers * shape.kv_heads * shape.head_dim *
                    static_cast<size_t>(context_tokens + query_tokens) * sizeof(float);
  if (o.calibration.gemm_rows == CpuMeasureOptions{}.gemm_rows) {
    cmo.gemm_rows = {1, 8, 32, 128, 512};
    cmo.gemm_rows.push_back(static_cast<int>(context_tokens + query_tokens));
  }
  ASSIGN_OR_RETURN(cal.ceilings, MeasureCpu(cmo));
  const CpuCeilings& ceilings = cal.ceilings;
  for (auto& t : tiers.stores) RETURN_IF_ERROR(ProbeTier(model, shape, prompts[0], tiers, *t));
  // raw: the pure roofline (sgemm peak, memcpy / file-read bandwidths).
  CpuCeilings roof = ceilings;
  roof.gemm_flops_at_rows.clear();
  roof.attention_flops = roof.row_op_bytes_per_s = roof.rerotate_bytes_per_s =
      roof.alloc_bytes_per_s = 0;
  blend::HardwareSpec& raw_hw = cal.raw_hw;
  raw_hw = CpuHardwareSpec(roof, 1.0);
  for (auto& t : tiers.stores) {
    if (t->tier == blend::Tier::kRemote) raw_hw.remote_tier_bw = t->probe_bytes_per_s;
  }
  const blend::CostModel raw_cm(shape, raw_hw);
  const double raw_chunk_s = raw_cm.FullPrefillSeconds(prefill.tokens, 0);
  rep.efficiency = raw_chunk_s / prefill.seconds;
  // calibrated: the measured kernel rates (nothing fitted to a TTFT) and
  // each tier's probed load bandwidth.
  cal.cal = CpuHardwareSpec(ceilings, 1.0);
  cal.cal.name = "cpu-calibrated";
  for (auto& t : tiers.stores) {
    double* bw = t->tier == blend::Tier::kRam   ? &cal.cal.ram_tier_bw
                 : t->tier == blend::Tier::kSsd ? &cal.cal.ssd_tier_bw
                                                : &cal.cal.remote_tier_bw;
    // The calibrated model counts the stream opening (before the blend)
    // and the layer reads (overlapped) separately.
    *bw = t->probe_read_bytes_per_s;
    cal.cal.tier_open_s[static_cast<int>(t->tier)] = t->probe_open_s;
  }
  // Kernel rates are re-measured between requests during the matrix; the
  // prediction uses their field-wise median, starting from these.
  cal.kernel_samples = {ceilings};
  return absl::OkStatus();
}

void PrintCalibration(const TtftBenchOptions& o, const Workload& workload,
                      const Calibration& cal, const TierSetup& tiers, const TtftReport& rep,
                      std::ostream& out) {
  const std::vector<Prompt>& prompts = workload.prompts;
  const CpuCeilings& ceilings = cal.ceilings;
  out << absl::StrFormat(
      "# bench ttft: %s, %s, KV %s, %d repeats\n"
      "# cpu: sgemm %.1f GFLOP/s (n=%d), memcpy %.2f GB/s, cold file read %.2f GB/s; "
      "prefill of %d tokens %.3f s = %.0f%% of the sgemm roofline\n",
      o.model_spec, workload.description, kernels::DTypeName(o.kv_dtype), o.repeats,
      ceilings.sgemm_flops / 1e9, ceilings.gemm_n, ceilings.copy_bytes_per_s / 1e9,
      ceilings.file_read_bytes_per_s / 1e9, cal.prefill.tokens, cal.prefill.seconds,
      rep.efficiency * 100);
  out << "# kernels: " << DescribeKernelRates(ceilings) << "\n";
  for (auto& t : tiers.stores) {
    out << absl::StrFormat(
        "# tier %s: probe load %.2f GB/s (open + read + decode one chunk; open %.2f ms, "
        "read + decode %.2f GB/s); opening a prompt's %d streams: %.2f ms per chunk\n",
        t->name, t->probe_bytes_per_s / 1e9, t->probe_single_open_s * 1e3,
        t->probe_read_bytes_per_s / 1e9, static_cast<int>(prompts[0].keys.size()),
        t->probe_open_s * 1e3);
  }
  for (const auto& n : rep.notes) out << "# " << n << "\n";
}

void FinishCalibration(Calibration& cal, TtftReport& rep, std::ostream& out) {
  cal.kernel_median = MedianCeilings(cal.kernel_samples);
  const CpuCeilings& kernel_median = cal.kernel_median;
  {
    blend::HardwareSpec spec = CpuHardwareSpec(kernel_median, 1.0);
    // Loads: the tier probes (measured once, before the matrix).
    spec.name = "cpu-calibrated";
    spec.ram_tier_bw = cal.cal.ram_tier_bw;
    spec.ssd_tier_bw = cal.cal.ssd_tier_bw;
    spec.remote_tier_bw = cal.cal.remote_tier_bw;
    for (int i = 0; i < 3; ++i) spec.tier_open_s[i] = cal.cal.tier_open_s[i];
    cal.cal = spec;
  }
  rep.cpu = cal.cal;
  out << absl::StrFormat("# kernels, median of %d calibrations during the matrix: %s\n",
                         cal.kernel_samples.size(), DescribeKernelRates(kernel_median));
}

// ---- Aggregate ----

FullPrefillP50 AggregateRows(const std::vector<Config>& configs, const Calibration& cal,
                             const std::vector<Prompt>& prompts, TtftReport& rep) {
  const blend::CostModel raw_cm(cal.shape, cal.raw_hw);
  const blend::CostModel final_cm(cal.shape, cal.cal);
  // The Blender's first chunk sits at offset 0 (exact).
  blend::RequestShape rs;
  rs.context_tokens = cal.context_tokens;
  rs.query_tokens = cal.query_tokens;
  rs.exact_prefix_tokens = static_cast<int64_t>(prompts[0].chunks[0].size());
  rs.cached_chunks = static_cast<int64_t>(prompts[0].chunks.size());
  rs.query_lookahead = true;  // the measured blends use the default selector
  // The prefix rows' exact prefix: what each prompt shares with the
  // previous one in whole blocks (ttft_prefix.cc), averaged.
  blend::RequestShape rs_prefix = rs;
  int64_t shared = 0;
  for (size_t i = 0; i < prompts.size(); ++i) shared += SharedWithPrevious(prompts, i);
  rs_prefix.exact_prefix_tokens = shared / static_cast<int64_t>(prompts.size());
  rs_prefix.cached_chunks = rs_prefix.exact_prefix_tokens > 0 ? 1 : 0;
  double full_p50 = 0, full_p50_grpc = 0;
  for (const Config& c : configs) {
    const std::string tier = c.rq.tier ? c.rq.tier->name : "-";
    const std::string path = c.grpc ? "grpc" : "inproc";
    std::vector<const TtftSample*> mine;
    for (const auto& s : rep.samples) {
      if (s.phase == "matrix" && s.strategy == c.strategy && s.tier == tier && s.path == path &&
          (c.strategy != "blend" || s.ratio == c.rq.ratio)) {
        mine.push_back(&s);
      }
    }
    if (mine.empty()) continue;
    std::vector<double> t;
    double bytes = 0, ratio_sum = 0;
    for (const auto* s : mine) {
      t.push_back(s->ttft_s);
      bytes += static_cast<double>(s->kv_bytes);
      ratio_sum += s->ratio;
    }
    TtftRow row;
    row.strategy = c.strategy;
    row.tier = tier;
    row.path = path;
    row.ratio = ratio_sum / static_cast<double>(mine.size());
    row.ttft = Summarize(t);
    row.kv_mb = bytes / static_cast<double>(mine.size()) / 1e6;
    std::sort(mine.begin(), mine.end(),
              [](const TtftSample* a, const TtftSample* b) { return a->ttft_s < b->ttft_s; });
    row.median = *mine[mine.size() / 2];
    row.stages = row.median.stages;
    row.wire_mb = static_cast<double>(row.median.wire_bytes) / 1e6;
    if (!c.grpc) {
      // The in-process rows are what the cost model describes; the gRPC
      // rows' extra is reported as measured transport overhead.
      const blend::Tier bt = c.rq.tier ? c.rq.tier->tier : blend::Tier::kRam;
      const blend::RequestShape& shape = c.strategy == "prefix" ? rs_prefix : rs;
      row.predicted_raw_s = Predict(raw_cm, shape, c.strategy, bt, row.ratio).total_s;
      row.predicted = Predict(final_cm, shape, c.strategy, bt, row.ratio);
      row.predicted_cal_s = row.predicted.total_s;
    }
    if (c.strategy == "full-prefill") (c.grpc ? full_p50_grpc : full_p50) = row.ttft.p50;
    const double base = c.grpc ? full_p50_grpc : full_p50;
    row.vs_full = base > 0 ? row.ttft.p50 / base : 0;
    rep.rows.push_back(row);
  }
  // Transport overhead: each gRPC row against its in-process twin.
  for (TtftRow& g : rep.rows) {
    if (g.path != "grpc") continue;
    for (const TtftRow& i : rep.rows) {
      if (i.path == "inproc" && i.strategy == g.strategy && i.tier == g.tier &&
          (g.strategy == "controller" || std::abs(i.ratio - g.ratio) < 1e-9)) {
        g.transport_s = g.ttft.p50 - i.ttft.p50;
      }
    }
  }
  FullPrefillP50 full;
  full.inproc = full_p50;
  full.grpc = full_p50_grpc;
  return full;
}

// ---- Quality deltas (optional) ----

void AddQualityDeltas(const TtftBenchOptions& o, TtftReport& rep) {
  if (o.quality_prompts <= 0) return;
  blend::QualityBenchOptions qo;
  qo.model_path = o.model_spec;
  qo.max_seq_len = o.max_seq_len > 0 ? o.max_seq_len : 512;
  qo.prompts = o.quality_prompts;
  qo.chunks = o.chunks;
  qo.chunk_tokens_min = qo.chunk_tokens_max = o.chunk_tokens;
  qo.query_tokens = std::min(o.query_tokens, 16);
  qo.ratios = o.ratios;
  std::ostringstream qlog;
  absl::StatusOr<std::vector<blend::StrategyQuality>> q = blend::RunQualityBench(qo, qlog);
  if (!q.ok()) {
    rep.notes.push_back("quality bench failed: " + q.status().ToString());
    return;
  }
  for (TtftRow& row : rep.rows) {
    for (const auto& sq : *q) {
      const bool match =
          (row.strategy == "full-reuse" && sq.family == "full-reuse") ||
          (row.strategy == "prefix" && sq.family == "prefix-reuse") ||
          (row.strategy == "blend" && sq.family == "gradual" &&
           std::abs(sq.ratio - row.ratio) < 1e-9);
      if (match) {
        row.quality_kl = sq.kl;
        row.quality_top1 = sq.top1;
      }
    }
    if (row.strategy == "full-prefill") row.quality_kl = 0, row.quality_top1 = 1;
  }
}

}  // namespace ragkv::services::ttft_internal
