// ttft_report.cc: the report of `ragkv bench ttft` (internal/ttft_internal.h): the
// Markdown summary (rows, prediction by stage, gRPC by stage, targets, load,
// sweep, multi-user), samples.csv / samples.json / summary.md and the
// gnuplot PNGs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "kernels/tensor.h"

namespace ragkv::services::ttft_internal {

using blend::DescribeKernelRates;

std::string Ms(double s) { return absl::StrFormat("%.0f", s * 1e3); }

std::string StrategyLabel(const std::string& strategy, double ratio) {
  if (strategy == "blend") return absl::StrFormat("blend r=%.2f", ratio);
  return strategy;
}

// RunGnuplot: writes `script` next to the PNG and runs gnuplot on it.
absl::Status RunGnuplot(const std::string& dir, const std::string& name, const std::string& script) {
  const std::string path = dir + "/" + name + ".gp";
  {
    std::ofstream f(path);
    f << script;
    if (!f) return absl::InternalError("cannot write " + path);
  }
  const std::string cmd = absl::StrCat("gnuplot '", path, "' 2>'", dir, "/", name, ".log'");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed on ", path, " (see ", name, ".log)"));
  }
  return absl::OkStatus();
}

std::string GnuplotTerminal() {
  static const std::string t =
      std::system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0 ? "pngcairo" : "png";
  return t;
}

namespace {

// PredMs: a prediction in ms, "-" when there is none.
std::string PredMs(double s) { return s > 0 ? Ms(s) : std::string("-"); }

// ---- Markdown ----

// MarkdownHeader: the workload and calibration paragraphs and the notes.
void MarkdownHeader(std::ostringstream& md, const TtftBenchOptions& o,
                    const std::string& workload, const Calibration& cal, const TtftReport& rep) {
  const blend::CpuCeilings& ceilings = cal.ceilings;
  md << "Workload: " << workload << "; model `" << o.model_spec << "`, KV "
     << kernels::DTypeName(o.kv_dtype) << ", " << o.repeats << " pass(es), path " << o.path
     << " (inproc: Blender over StoreKvSource streams, loading overlapped; grpc: client -> "
        "ragkv engine -> sidecar Blend over loopback gRPC).\n\n";
  md << absl::StrFormat(
      "CPU calibration (same run): sgemm %.1f GFLOP/s (n=%d), memcpy %.2f GB/s, cold file "
      "read %.2f GB/s; kernels of one layer of this model (median of %d calibrations "
      "interleaved with the matrix, each the median of its runs): %s. A full prefill of one "
      "%d-token chunk ran at %.0f%% of the sgemm roofline (reported only). \"pred raw\" is "
      "the pure roofline; \"pred cal\" uses the measured kernel rates and each tier's "
      "probed load bandwidth (docs/planner.md).\n\n",
      ceilings.sgemm_flops / 1e9, ceilings.gemm_n, ceilings.copy_bytes_per_s / 1e9,
      ceilings.file_read_bytes_per_s / 1e9, cal.kernel_samples.size(),
      DescribeKernelRates(cal.kernel_median), cal.prefill.tokens, rep.efficiency * 100);
  for (const auto& n : rep.notes) md << "- " << n << "\n";
  if (!rep.notes.empty()) md << "\n";
}

// RowsTable: one line per row of the matrix (+ KL / top-1 with quality).
void RowsTable(std::ostringstream& md, const TtftBenchOptions& o, const TtftReport& rep) {
  const bool quality = o.quality_prompts > 0;
  md << "| strategy | tier | path | r | n | p50 ms | p95 ms | p99 ms | vs full | transport ms "
        "| pred raw ms | pred cal ms | cal/meas | KV MB | load ms | load-wait ms | layer0 ms | "
        "select ms | recompute ms |"
     << (quality ? " KL | top-1 |" : "") << "\n";
  md << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|"
     << (quality ? "---:|---:|" : "") << "\n";
  for (const TtftRow& r : rep.rows) {
    const bool g = r.path == "grpc";
    md << absl::StrFormat(
        "| %s | %s | %s | %.2f | %d | %s | %s | %s | %.3f | %s | %s | %s | %s | %.1f | %s | %s | "
        "%s | %s | %s |",
        r.strategy, r.tier, r.path, r.ratio, r.ttft.count, Ms(r.ttft.p50), Ms(r.ttft.p95),
        Ms(r.ttft.p99), r.vs_full, g ? Ms(r.transport_s) : std::string("-"),
        PredMs(r.predicted_raw_s), PredMs(r.predicted_cal_s),
        r.predicted_cal_s > 0 && r.ttft.p50 > 0
            ? absl::StrFormat("%.2f", r.predicted_cal_s / r.ttft.p50)
            : std::string("-"),
        g ? r.wire_mb : r.kv_mb, g ? "-" : Ms(r.stages.load_s),
        g ? "-" : Ms(r.stages.load_wait_s), g ? "-" : Ms(r.stages.layer0_s),
        g ? "-" : Ms(r.stages.selection_s), g ? "-" : Ms(r.stages.recompute_s));
    if (quality) {
      md << (r.quality_kl >= 0 ? absl::StrFormat(" %.4f | %.3f |", r.quality_kl, r.quality_top1)
                               : std::string(" - | - |"));
    }
    md << "\n";
  }
  md << "\n(KV MB: bytes read from the tier per request; for gRPC rows, the fused f16 KV "
        "streamed from the sidecar to the engine.)\n";
}

// StageTables: predicted vs measured by stage (in-process rows), then the
// gRPC path's engine breakdown (when there are gRPC rows).
void StageTables(std::ostringstream& md, const TtftReport& rep) {
  // Predicted vs measured, by stage (in-process rows; medians).
  md << "\nPrediction by stage (calibrated model, ms; measured median in parentheses; "
        "\"other\" = measured TTFT minus the measured stages: fused-cache allocation, "
        "embedding, merge, logits):\n\n"
        "| strategy | tier | r | open | alloc | exposed load | layer0 | select | recompute | "
        "logits | total | measured | cal/meas |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const TtftRow& r : rep.rows) {
    if (r.path != "inproc" || r.predicted_cal_s <= 0) continue;
    const blend::RequestPrediction& p = r.predicted;
    const blend::StageTimings& st = r.stages;
    const double other = r.median.ttft_s - r.median.open_s - st.load_wait_s - st.layer0_s -
                         st.selection_s - st.recompute_s;
    md << absl::StrFormat(
        "| %s | %s | %.2f | %s (%s) | %s | %s (%s) | %s (%s) | %s (%s) | %s (%s) | %s | %s (other "
        "%s) | %s | %.2f |\n",
        r.strategy, r.tier, r.ratio, Ms(p.open_s), Ms(r.median.open_s), Ms(p.alloc_s),
        Ms(p.exposed_load_s), Ms(st.load_wait_s),
        Ms(p.layer0_s), Ms(st.layer0_s), Ms(p.selection_s), Ms(st.selection_s),
        Ms(p.recompute_s), Ms(st.recompute_s), Ms(p.logits_s), Ms(p.total_s), Ms(other),
        Ms(r.ttft.p50), r.ttft.p50 > 0 ? p.total_s / r.ttft.p50 : 0.0);
  }
  // The real path, by stage (engine breakdown of the median sample).
  bool any_grpc = false;
  for (const TtftRow& r : rep.rows) any_grpc |= r.path == "grpc";
  if (any_grpc) {
    md << "\ngRPC path by stage (median sample; engine.proto TtftBreakdown, ms): client TTFT = "
          "engine TTFT + the client hop; engine TTFT = fetch (sidecar store reads, or GetChunks "
          "for full prefill) + Blend RPC (sidecar blend + streaming the fused f16 KV + import "
          "into the engine's cache) + the engine's own prefill (the last query token on top "
          "of the fused KV, which holds the sidecar's query rows; every row for full "
          "prefill):\n\n"
          "| strategy | tier | r | client p50 | in-process p50 | transport | engine TTFT | fetch | "
          "blend RPC | engine prefill | wire MB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const TtftRow& r : rep.rows) {
      if (r.path != "grpc") continue;
      const TtftSample& m = r.median;
      md << absl::StrFormat("| %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %.1f |\n",
                            r.strategy, r.tier, r.ratio, Ms(r.ttft.p50), Ms(r.ttft.p50 - r.transport_s),
                            Ms(r.transport_s), Ms(m.rpc_engine_ttft_s), Ms(m.rpc_fetch_s),
                            Ms(m.rpc_blend_s), Ms(m.rpc_prefill_s), r.wire_mb);
    }
  }
}

// FindInprocRow: the in-process row of `strategy` from `tier` (blend: at
// `ratio`); null when there is none.
const TtftRow* FindInprocRow(const std::vector<TtftRow>& rows, const std::string& strategy,
                             const std::string& tier, double ratio) {
  for (const TtftRow& r : rows) {
    if (r.path == "inproc" && r.strategy == strategy && r.tier == tier &&
        (strategy != "blend" || std::abs(r.ratio - ratio) < 1e-9)) {
      return &r;
    }
  }
  return nullptr;
}

// TargetsList: each target (vs full prefill, p50) met or missed, with where
// the time went when missed.
void TargetsList(std::ostringstream& md, const TtftReport& rep) {
  // Targets (issue 8).
  md << "\nTargets (vs full prefill, p50):\n\n";
  for (const auto& [strategy, tier, ratio, target] :
       std::vector<std::tuple<std::string, std::string, double, double>>{
           {"blend", "ram", 0.15, 0.33}, {"blend", "ssd", 0.15, 0.40},
           {"full-reuse", "ram", 0, 0.15}, {"full-reuse", "ssd", 0, 0.15}}) {
    const TtftRow* r = FindInprocRow(rep.rows, strategy, tier, ratio);
    if (r == nullptr) continue;
    const blend::StageTimings& st = r->stages;
    md << absl::StrFormat(
        "- %s from %s: %.3f x full (target <= %.2f): **%s**%s\n", StrategyLabel(strategy, ratio),
        tier, r->vs_full, target, r->vs_full <= target ? "met" : "missed",
        r->vs_full <= target
            ? ""
            : absl::StrFormat(" -- time went to: load %s ms (compute waited %s), rerotate %s, "
                              "embed %s, layer0 %s, selection %s, recompute %s, merge %s, "
                              "logits %s ms",
                              Ms(st.load_s), Ms(st.load_wait_s), Ms(st.rerotate_s),
                              Ms(st.embed_s), Ms(st.layer0_s), Ms(st.selection_s),
                              Ms(st.recompute_s), Ms(st.merge_s), Ms(st.logits_s)));
  }
}

// PhaseTables: the load and sweep tables (each when it ran).
void PhaseTables(std::ostringstream& md, const TtftBenchOptions& o, const Phases& phases) {
  const std::vector<LoadRow>& load_rows = phases.load_rows;
  const std::vector<SweepRow>& sweep = phases.sweep;
  if (!load_rows.empty()) {
    md << absl::StrFormat(
        "\nUnder load (blend r=%.2f from RAM, %d requests per level; the machine has %u "
        "hardware threads, so higher levels queue):\n\n"
        "| concurrency | requests | req/s | p50 ms | p95 ms | p99 ms |\n"
        "|---:|---:|---:|---:|---:|---:|\n",
        o.load_ratio, o.load_requests, std::thread::hardware_concurrency());
    for (const auto& l : load_rows) {
      md << absl::StrFormat("| %d | %d | %.2f | %s | %s | %s |\n", l.concurrency, l.requests,
                            l.requests / l.wall_s, Ms(l.ttft.p50), Ms(l.ttft.p95),
                            Ms(l.ttft.p99));
    }
  }
  if (!sweep.empty()) {
    md << absl::StrFormat(
        "\nSpeedup vs context length (prompt 0's first n chunks, RAM tier):\n\n"
        "| chunks | context tokens | full ms | full-reuse ms | blend r=%.2f ms | reuse speedup | "
        "blend speedup |\n|---:|---:|---:|---:|---:|---:|---:|\n",
        o.load_ratio);
    for (const auto& s : sweep) {
      md << absl::StrFormat("| %d | %d | %s | %s | %s | %.2f | %.2f |\n", s.chunks, s.context,
                            Ms(s.full_s), Ms(s.reuse_s), Ms(s.blend_s), s.full_s / s.reuse_s,
                            s.full_s / s.blend_s);
    }
  }
}

}  // namespace

std::string BuildMarkdown(const TtftBenchOptions& o, const std::string& workload,
                          const Calibration& cal, const Phases& phases, const TtftReport& rep) {
  std::ostringstream md;
  MarkdownHeader(md, o, workload, cal, rep);
  RowsTable(md, o, rep);
  StageTables(md, rep);
  TargetsList(md, rep);
  PhaseTables(md, o, phases);
  md << phases.multi_md;
  return md.str();
}

// ---- Files ----

namespace {

// WriteSamplesCsv: d/samples.csv, one line per sample. Errors: unwritable.
absl::Status WriteSamplesCsv(const std::string& d, TtftReport& rep) {
  std::ofstream f(d + "/samples.csv");
  f << "phase,strategy,tier,path,ratio,concurrency,prompt,rep,context_tokens,"
       "recomputed_rows,kv_bytes,ttft_ms,open_ms,load_ms,load_wait_ms,rerotate_ms,embed_ms,"
       "layer0_ms,selection_ms,recompute_ms,merge_ms,logits_ms,rpc_engine_ttft_ms,"
       "rpc_fetch_ms,rpc_blend_ms,rpc_prefill_ms,wire_bytes\n";
  for (const auto& s : rep.samples) {
    const auto& t = s.stages;
    f << absl::StrFormat("%s,%s,%s,%s,%.4f,%d,%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
                         "%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%d\n",
                         s.phase, s.strategy, s.tier, s.path, s.ratio, s.concurrency,
                         s.prompt, s.rep, s.context_tokens, s.recomputed_rows, s.kv_bytes,
                         s.ttft_s * 1e3, s.open_s * 1e3, t.load_s * 1e3, t.load_wait_s * 1e3,
                         t.rerotate_s * 1e3, t.embed_s * 1e3, t.layer0_s * 1e3,
                         t.selection_s * 1e3, t.recompute_s * 1e3, t.merge_s * 1e3,
                         t.logits_s * 1e3, s.rpc_engine_ttft_s * 1e3, s.rpc_fetch_s * 1e3,
                         s.rpc_blend_s * 1e3, s.rpc_prefill_s * 1e3, s.wire_bytes);
  }
  if (!f) return absl::InternalError("cannot write " + d + "/samples.csv");
  rep.files.push_back(d + "/samples.csv");
  return absl::OkStatus();
}

// WriteSamplesJson: d/samples.json (the model, the ceilings, the rows and
// the samples). Errors: unwritable.
absl::Status WriteSamplesJson(const std::string& d, const TtftBenchOptions& o,
                              const Calibration& cal, TtftReport& rep) {
  const blend::CpuCeilings& ceilings = cal.ceilings;
  std::ofstream f(d + "/samples.json");
  f << "{\"model\":\"" << o.model_spec << "\",\"efficiency\":" << rep.efficiency
    << ",\"sgemm_flops\":" << ceilings.sgemm_flops
    << ",\"memcpy_bytes_per_s\":" << ceilings.copy_bytes_per_s << ",\"rows\":[";
  for (size_t i = 0; i < rep.rows.size(); ++i) {
    const auto& r = rep.rows[i];
    f << (i ? "," : "")
      << absl::StrFormat("{\"strategy\":\"%s\",\"tier\":\"%s\",\"path\":\"%s\","
                         "\"ratio\":%.4f,\"n\":%d,"
                         "\"p50_ms\":%.3f,\"p95_ms\":%.3f,\"p99_ms\":%.3f,\"vs_full\":%.4f,"
                         "\"transport_ms\":%.3f,\"wire_mb\":%.3f,"
                         "\"pred_raw_ms\":%.3f,\"pred_cal_ms\":%.3f,\"kv_mb\":%.3f,"
                         "\"pred_stages_ms\":{\"alloc\":%.3f,\"exposed_load\":%.3f,"
                         "\"load\":%.3f,\"layer0\":%.3f,\"selection\":%.3f,"
                         "\"recompute\":%.3f,\"logits\":%.3f}}",
                         r.strategy, r.tier, r.path, r.ratio, r.ttft.count, r.ttft.p50 * 1e3,
                         r.ttft.p95 * 1e3, r.ttft.p99 * 1e3, r.vs_full, r.transport_s * 1e3,
                         r.wire_mb, r.predicted_raw_s * 1e3, r.predicted_cal_s * 1e3, r.kv_mb,
                         r.predicted.alloc_s * 1e3, r.predicted.exposed_load_s * 1e3,
                         r.predicted.load_s * 1e3, r.predicted.layer0_s * 1e3,
                         r.predicted.selection_s * 1e3, r.predicted.recompute_s * 1e3,
                         r.predicted.logits_s * 1e3);
  }
  f << "],\"samples\":[";
  for (size_t i = 0; i < rep.samples.size(); ++i) {
    const auto& s = rep.samples[i];
    f << (i ? "," : "")
      << absl::StrFormat("{\"phase\":\"%s\",\"strategy\":\"%s\",\"tier\":\"%s\","
                         "\"path\":\"%s\",\"ratio\":%.4f,\"concurrency\":%d,\"prompt\":%d,\"rep\":%d,"
                         "\"context_tokens\":%d,\"recomputed_rows\":%d,\"kv_bytes\":%d,"
                         "\"ttft_ms\":%.3f,\"load_ms\":%.3f,\"recompute_ms\":%.3f}",
                         s.phase, s.strategy, s.tier, s.path, s.ratio, s.concurrency,
                         s.prompt, s.rep, s.context_tokens, s.recomputed_rows, s.kv_bytes,
                         s.ttft_s * 1e3, s.stages.load_s * 1e3, s.stages.recompute_s * 1e3);
  }
  f << "]}\n";
  if (!f) return absl::InternalError("cannot write " + d + "/samples.json");
  rep.files.push_back(d + "/samples.json");
  return absl::OkStatus();
}

// PlotTtftVsRatio: 1. TTFT vs recompute ratio per tier (full reuse at
// r = 0), with the gRPC series when there are gRPC rows. Errors: gnuplot.
absl::Status PlotTtftVsRatio(const std::string& d, const std::string& term,
                             const TierSetup& tiers, const FullPrefillP50& full_p50s,
                             TtftReport& rep) {
  const double full_p50 = full_p50s.inproc, full_p50_grpc = full_p50s.grpc;
  std::ofstream f(d + "/ttft_vs_ratio.dat");
  std::string plot;
  int idx = 0;
  for (auto& t : tiers.stores) {
    f << "# tier " << t->name << "\n";
    for (const TtftRow& r : rep.rows) {
      if (r.path == "inproc" && r.tier == t->name &&
          (r.strategy == "full-reuse" || r.strategy == "blend")) {
        f << absl::StrFormat("%.3f %.3f\n", r.ratio * 100, r.ttft.p50 * 1e3);
      }
    }
    f << "\n\n";
    absl::StrAppend(&plot, idx ? ", " : "", "'", d, "/ttft_vs_ratio.dat' index ", idx,
                    " with linespoints lw 2 title '", t->name, "'");
    ++idx;
  }
  if (full_p50_grpc > 0) {
    for (auto& t : tiers.stores) {
      f << "# grpc path, sidecar with tier " << t->name << "\n";
      int n = 0;
      for (const TtftRow& r : rep.rows) {
        if (r.path == "grpc" && r.tier == t->name &&
            (r.strategy == "full-reuse" || r.strategy == "blend")) {
          f << absl::StrFormat("%.3f %.3f\n", r.ratio * 100, r.ttft.p50 * 1e3);
          ++n;
        }
      }
      f << "\n\n";
      if (n == 0) {
        ++idx;
        continue;
      }
      absl::StrAppend(&plot, idx ? ", " : "", "'", d, "/ttft_vs_ratio.dat' index ", idx,
                      " with linespoints lw 2 dt 3 title '", t->name,
                      " via gRPC (engine)'");
      ++idx;
    }
    absl::StrAppend(&plot, ", ", full_p50_grpc * 1e3,
                    " with lines dt 3 lw 2 title 'full prefill via gRPC'");
  }
  f.close();  // flushed before gnuplot reads it
  const double full = full_p50 * 1e3;
  absl::StrAppend(&plot, idx ? ", " : "", full, " with lines dt 2 lw 2 title 'full prefill'");
  RETURN_IF_ERROR(RunGnuplot(
      d, "ttft_vs_ratio",
      absl::StrCat("set terminal ", term, " size 900,560\nset output '", d,
                   "/ttft_vs_ratio.png'\nset title 'TTFT vs recompute ratio per KV tier'\n"
                   "set xlabel 'recompute ratio r (%)'\nset ylabel 'TTFT p50 (ms)'\n"
                   "set yrange [0:*]\nset key top left\nset grid\nplot ",
                   plot, "\n")));
  rep.files.push_back(d + "/ttft_vs_ratio.png");
  return absl::OkStatus();
}

// PlotSpeedupVsContext: 2. speedup vs context length (the sweep). Errors:
// gnuplot.
absl::Status PlotSpeedupVsContext(const std::string& d, const std::string& term,
                                  const TtftBenchOptions& o, const std::vector<SweepRow>& sweep,
                                  TtftReport& rep) {
  std::ofstream f(d + "/speedup_vs_context.dat");
  for (const auto& s : sweep) {
    f << absl::StrFormat("%d %.4f %.4f\n", s.context, s.full_s / s.reuse_s,
                         s.full_s / s.blend_s);
  }
  f.close();
  RETURN_IF_ERROR(RunGnuplot(
      d, "speedup_vs_context",
      absl::StrCat("set terminal ", term, " size 900,560\nset output '", d,
                   "/speedup_vs_context.png'\nset title 'TTFT speedup over full prefill "
                   "vs context length (RAM tier)'\nset xlabel 'context tokens'\n"
                   "set ylabel 'speedup (x)'\nset yrange [0:*]\nset key top left\n"
                   "set grid\nplot '", d, "/speedup_vs_context.dat' using 1:2 with "
                   "linespoints lw 2 title 'full reuse', '' using 1:3 with linespoints "
                   "lw 2 title 'CacheBlend r=",
                   absl::StrFormat("%.2f", o.load_ratio), "'\n")));
  rep.files.push_back(d + "/speedup_vs_context.png");
  return absl::OkStatus();
}

// PlotCdfLoad: 3. TTFT CDF under load, one series per level. Errors:
// gnuplot.
absl::Status PlotCdfLoad(const std::string& d, const std::string& term,
                         const TtftBenchOptions& o, const std::vector<LoadRow>& load_rows,
                         TtftReport& rep) {
  std::ofstream f(d + "/ttft_cdf_load.dat");
  std::string plot;
  int idx = 0;
  for (const auto& l : load_rows) {
    std::vector<double> t;
    for (const auto& s : rep.samples) {
      if (s.phase == "load" && s.concurrency == l.concurrency) t.push_back(s.ttft_s);
    }
    std::sort(t.begin(), t.end());
    f << "# concurrency " << l.concurrency << "\n";
    for (size_t i = 0; i < t.size(); ++i) {
      f << absl::StrFormat("%.3f %.4f\n", t[i] * 1e3,
                           static_cast<double>(i + 1) / static_cast<double>(t.size()));
    }
    f << "\n\n";
    absl::StrAppend(&plot, idx ? ", " : "", "'", d, "/ttft_cdf_load.dat' index ", idx,
                    " with steps lw 2 title 'concurrency ", l.concurrency, "'");
    ++idx;
  }
  f.close();
  RETURN_IF_ERROR(RunGnuplot(
      d, "ttft_cdf_load",
      absl::StrCat("set terminal ", term, " size 900,560\nset output '", d,
                   "/ttft_cdf_load.png'\nset title 'TTFT CDF under load (CacheBlend r=",
                   absl::StrFormat("%.2f", o.load_ratio),
                   ", RAM tier)'\nset xlabel 'TTFT (ms)'\nset ylabel 'fraction of "
                   "requests'\nset yrange [0:1]\nset key bottom right\nset grid\nplot ",
                   plot, "\n")));
  rep.files.push_back(d + "/ttft_cdf_load.png");
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFiles(const TtftBenchOptions& o, const Calibration& cal,
                        const TierSetup& tiers, const FullPrefillP50& full,
                        const Phases& phases, TtftReport& rep, std::ostream& out) {
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  const std::string d = o.out_dir;
  RETURN_IF_ERROR(WriteSamplesCsv(d, rep));
  RETURN_IF_ERROR(WriteSamplesJson(d, o, cal, rep));
  {
    std::ofstream f(d + "/summary.md");
    f << rep.markdown;
    rep.files.push_back(d + "/summary.md");
  }
  if (o.plots) {
    if (std::system("gnuplot --version >/dev/null 2>&1") != 0) {
      rep.notes.push_back("plots skipped: gnuplot not on PATH");
      out << "# plots skipped: gnuplot not on PATH\n";
    } else {
      const std::string term = GnuplotTerminal();
      RETURN_IF_ERROR(PlotTtftVsRatio(d, term, tiers, full, rep));
      if (!phases.sweep.empty()) {
        RETURN_IF_ERROR(PlotSpeedupVsContext(d, term, o, phases.sweep, rep));
      }
      if (!phases.load_rows.empty()) {
        RETURN_IF_ERROR(PlotCdfLoad(d, term, o, phases.load_rows, rep));
      }
    }
  }
  for (const auto& f : rep.files) out << "# wrote " << f << "\n";
  return absl::OkStatus();
}

}  // namespace ragkv::services::ttft_internal
