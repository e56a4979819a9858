// bench_engine_report.cc: the output of `ragkv bench engine`
// (bench_engine.h): the per-strategy lines, a Markdown table, samples.csv,
// summary.json and ttft.png.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/engine/bench_engine.h"
#include "bench/services/internal/ttft_internal.h"
#include "kernels/gemm.h"

namespace ragkv::bench {
namespace {

std::string Label(const std::string& strategy, double ratio) {
  return absl::StartsWith(strategy, "cacheblend") ? absl::StrFormat("%s r=%.2f", strategy, ratio)
                                                   : strategy;
}

// JsonString: s quoted for JSON (the fallback texts are plain ASCII).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n') ? ' ' : c;
  }
  return out + "\"";
}

absl::Status WriteCsv(const EngineBenchReport& r, const std::string& path) {
  std::ofstream f(path);
  f << "round,prompt,strategy,ratio,ttft_ms,blend_ms,handover_ms,decode_ms,context_tokens,"
       "handed_over,reused,recomputed,prefilled,kl,top1,applied_ratio,fallback,query_tokens\n";
  for (const EngineSample& x : r.samples) {
    f << absl::StrFormat("%d,%d,%s,%.2f,%.3f,%.3f,%.3f,%.3f,%d,%d,%d,%d,%d,%.9f,%.4f,%.4f,%s,%d\n",
                         x.round, x.prompt, x.strategy, x.ratio, x.ttft_ms, x.blend_ms,
                         x.handover_ms, x.decode_ms, x.context_tokens, x.handed_over, x.reused,
                         x.recomputed, x.prefilled, x.kl, x.top1, x.applied_ratio,
                         JsonString(x.fallback), x.query_tokens);
  }
  return f ? absl::OkStatus() : absl::InternalError("cannot write " + path);
}

absl::Status WriteJson(const EngineBenchReport& r, const std::string& path) {
  std::ofstream f(path);
  f << "{\n  \"engine\": \"llama.cpp\",\n  \"workload\": " << JsonString(r.workload)
    << ",\n  \"command\": " << JsonString(r.command) << ",\n  \"split\": "
    << (r.split.empty() ? "null" : JsonString(r.split))
    << absl::StrFormat(", \"questions\": %d, \"split_questions\": %d, \"file_questions\": %d, "
                       "\"prompts_requested\": %d",
                       r.questions, r.split_questions, r.file_questions, r.prompts_requested)
    << absl::StrFormat(",\n  \"fused_cache_mb\": %.1f, \"fresh_cache_ms\": %.2f, "
                       "\"kept_cache_ms\": %.2f",
                       r.cache_pages.mb, r.cache_pages.fresh_ms, r.cache_pages.kept_ms)
    << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const EngineRow& w = r.rows[i];
    f << absl::StrFormat(
        "    {\"strategy\": \"%s\", \"ratio\": %.2f, \"n\": %d, \"ttft_p50_ms\": %.3f, "
        "\"ttft_p95_ms\": %.3f, \"vs_full\": %.4f, \"kl\": %.9f, \"top1\": %.4f, "
        "\"blend_p50_ms\": %.3f, \"handover_p50_ms\": %.3f, \"decode_p50_ms\": %.3f, "
        "\"mean_r\": %.6f, \"kl_vs_reuse\": %.6f, \"kl_vs_reuse_ci95\": [%.6f, %.6f], "
        "\"fallbacks\": %d}%s\n",
        w.strategy, w.ratio, w.ttft.count, w.ttft.p50, w.ttft.p95, w.vs_full, w.kl, w.top1,
        w.blend_p50, w.handover_p50, w.decode_p50, w.mean_r, w.kl_vs_reuse, w.kl_vs_reuse_lo,
        w.kl_vs_reuse_hi, w.fallbacks, i + 1 < r.rows.size() ? "," : "");
  }
  f << "  ]\n}\n";
  return f ? absl::OkStatus() : absl::InternalError("cannot write " + path);
}

// Plot: TTFT p50 per strategy (bars) with p95 (error bar), vs_full on top.
absl::Status Plot(const EngineBenchReport& r, const std::string& dir) {
  if (std::system("gnuplot --version >/dev/null 2>&1") != 0) {
    std::cerr << "bench engine: gnuplot not found: no ttft.png\n";
    return absl::OkStatus();
  }
  {
    std::ofstream d(dir + "/ttft.dat");
    for (const EngineRow& w : r.rows) {
      d << absl::StrFormat("\"%s\" %.3f %.3f %.3f\n", Label(w.strategy, w.ratio), w.ttft.p50,
                           w.ttft.p95, w.vs_full);
    }
  }
  const std::string script = absl::StrFormat(
      "set terminal %s size 1000,520\nset output '%s/ttft.png'\n"
      "set title 'TTFT inside llama.cpp (%s)' noenhanced font ',10'\n"
      "set ylabel 'TTFT ms (p50, bar to p95)'\nset xtics font ',9' noenhanced\nset offsets 0.5,0.5,0,0\n"
      "set style fill solid 0.6\nset boxwidth 0.6\nset yrange [0:*]\nset grid ytics\n"
      "plot '%s/ttft.dat' using 0:2:xtic(1) with boxes notitle, "
      "'' using 0:2:2:3 with yerrorbars lc rgb 'black' notitle, "
      "'' using 0:3:(sprintf('%%.2fx', $4)) with labels offset 0,1 notitle\n",
      services::ttft_internal::GnuplotTerminal(), dir, r.workload, dir);
  return services::ttft_internal::RunGnuplot(dir, "ttft", script);
}

}  // namespace

void PrintEngineBench(const EngineBenchReport& r, std::ostream& out) {
  out << "# bench engine: " << r.workload << "\n";
  if (!r.split.empty() && r.file_questions == 0) {  // xchunk: the split is the seed's
    out << absl::StrFormat("# split=%s prompts=%d (by the seed's parity)\n", r.split, r.questions);
  } else if (!r.split.empty()) {
    out << absl::StrFormat(
        "# split=%s questions=%d (of the split's %d, the file's %d)%s\n", r.split, r.questions,
        r.split_questions, r.file_questions,
        r.questions < r.prompts_requested
            ? absl::StrFormat("; --prompts %d exceeds the split's usable questions: all used",
                              r.prompts_requested)
            : "");
  }
  out << "# ragkv's f32 GEMMs: OpenBLAS core " << kernels::BlasCoreName() << "\n";
  out << absl::StrFormat(
      "# one fused cache (%.1f MB f32): fresh memory %.1f ms, kept memory %.1f ms "
      "(the sidecar keeps it: --fused-cache-pool)\n",
      r.cache_pages.mb, r.cache_pages.fresh_ms, r.cache_pages.kept_ms);
  const std::string split =
      r.split.empty() ? "" : absl::StrFormat(" split=%s questions=%d", r.split, r.questions);
  for (const EngineRow& w : r.rows) {
    out << absl::StrFormat(
        "engine=llama.cpp strategy=%s r=%.2f ttft_p50_ms=%.1f ttft_p95_ms=%.1f vs_full=%.3f "
        "kl=%.5f top1=%.3f%s%s%s%s\n",
        w.strategy, w.ratio, w.ttft.p50, w.ttft.p95, w.vs_full, w.kl, w.top1,
        w.kl_vs_reuse > 0 ? absl::StrFormat(" kl_vs_reuse=%.3f[%.3f,%.3f]", w.kl_vs_reuse,
                                            w.kl_vs_reuse_lo, w.kl_vs_reuse_hi)
                          : "",
        w.acc >= 0 ? absl::StrFormat(" acc=%.3f", w.acc) : "",
        absl::StrContains(w.strategy, "adaptive") ? absl::StrFormat(" mean_r=%.4f", w.mean_r) : "",
        split);
  }
  out << "\n| strategy | n | TTFT p50 ms | p95 ms | vs full | blend p50 | handover p50 | "
         "llama.cpp prefill p50 | KL | top-1 | fallbacks |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const EngineRow& w : r.rows) {
    out << absl::StrFormat("| %s | %d | %.1f | %.1f | %.3f | %.1f | %.1f | %.1f | %.5f | %.3f | %d |\n",
                           Label(w.strategy, w.ratio), w.ttft.count, w.ttft.p50, w.ttft.p95,
                           w.vs_full, w.blend_p50, w.handover_p50, w.decode_p50, w.kl, w.top1,
                           w.fallbacks);
  }
}

absl::Status WriteEngineBenchFiles(const EngineBenchReport& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrFormat("cannot create %s: %s", dir, ec.message()));
  RETURN_IF_ERROR(WriteCsv(r, dir + "/samples.csv"));
  RETURN_IF_ERROR(WriteJson(r, dir + "/summary.json"));
  return Plot(r, dir);
}

}  // namespace ragkv::bench
