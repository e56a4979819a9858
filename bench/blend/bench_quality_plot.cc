// bench_quality_plot.cc: the files of `ragkv bench quality`
// (bench_quality.h: WritePlot, WriteCsv).
#include "bench/blend/bench_quality.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "blend/blender.h"

namespace ragkv::blend {
namespace {

// PlotFamilies: the ratio sweeps drawn, with their legend titles.
std::vector<std::pair<std::string, std::string>> PlotFamilies(const QualityBenchOptions& o) {
  const std::string sel = SelectorName(o.blend.selector);
  std::vector<std::pair<std::string, std::string>> f = {
      {"gradual", "gradual filtering (" + sel + ")"},
      {"single", "single check layer (" + sel + ")"},
      {"bottom-right", "single check + bottom-right mask"}};
  for (const std::string& name : o.selectors) f.push_back({"sel-" + name, "gradual, " + name});
  for (const std::string& name : o.kv_codecs) {
    if (name != "raw") f.push_back({"codec-" + name + "-gradual", "gradual, " + name + " records"});
  }
  return f;
}

}  // namespace

absl::Status WritePlot(const QualityBenchOptions& o, const std::vector<StrategyQuality>& rows) {
  const auto families = PlotFamilies(o);
  const bool acc = o.task == "xchunk";
  const std::string dat = o.png_path + ".dat";
  {
    std::ofstream f(dat);
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", dat));
    for (const auto& [fam, title] : families) {
      f << "# " << fam << "\n";
      for (const auto& r : rows) {
        if (r.family == fam) {
          f << r.ratio * 100 << " " << std::max(r.kl, 1e-6) << " " << (acc ? r.accuracy : r.top1)
            << "\n";
        }
      }
      f << "\n\n";
    }
  }
  double reuse_kl = 0, reuse_y = 0, full_y = 1;
  for (const auto& r : rows) {
    if (r.family == "full-reuse") reuse_kl = r.kl, reuse_y = acc ? r.accuracy : r.top1;
    if (r.family == "full-prefill") full_y = r.accuracy;
  }
  auto sweep = [&](int col) {
    std::string p = "plot ";
    for (size_t i = 0; i < families.size(); ++i) {
      p += absl::StrFormat("'%s' index %d using 1:%d with linespoints lw 2 title '%s', ", dat, i,
                           col, families[i].second);
    }
    return p;
  };
  const std::string gp = o.png_path + ".gp";
  {
    std::ofstream f(gp);
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", gp));
    const std::string what =
        acc ? absl::StrFormat("xchunk task, %d prompts, %d pairs in %d passages", o.prompts,
                              o.pairs, o.chunks)
            : absl::StrFormat("%d prompts, %d chunks x %d-%d tokens, query %d", o.prompts,
                              o.chunks, o.chunk_tokens_min, o.chunk_tokens_max, o.query_tokens);
    f << "set terminal pngcairo size 1200,480 font ',10'\n"
      << "set output '" << o.png_path << "'\n"
      << "set multiplot layout 1,2 title 'Blend quality vs full prefill (" << what << ")'\n"
      << "set xlabel 'recompute ratio r (%)'\nset grid\nset key top right\n"
      << "set ylabel 'mean KL(full || strategy) at query positions (nats)'\nset logscale y\n"
      << sweep(2) << reuse_kl << " with lines dt 2 lw 2 title 'full reuse (r=0)'\n"
      << "unset logscale y\nset key bottom right\n"
      << (acc ? "set ylabel 'answer accuracy'\nset yrange [0:1.05]\n"
              : "set ylabel 'top-1 agreement with full prefill'\n")
      << sweep(3) << reuse_y << " with lines dt 2 lw 2 title 'full reuse (r=0)'"
      << (acc ? absl::StrFormat(", %g with lines dt 3 lw 2 title 'full prefill'", full_y) : "")
      << "\nunset multiplot\n";
  }
  const std::string cmd = absl::StrCat("gnuplot '", gp, "' 2>&1");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed: ", cmd));
  }
  std::remove(dat.c_str());
  std::remove(gp.c_str());
  return absl::OkStatus();
}

absl::Status WriteCsv(const std::string& path, const std::vector<StrategyQuality>& rows) {
  std::ofstream f(path);
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  f << "strategy,family,ratio,kl,top1,dnll,recomputed_fraction,accuracy,mean_r\n";
  for (const auto& q : rows) {
    f << absl::StrFormat("%s,%s,%.2f,%.8f,%.6f,%.6f,%.4f,%.4f,%.4f\n", q.name, q.family, q.ratio,
                         q.kl, q.top1, q.dnll, q.recomputed_fraction, q.accuracy, q.mean_r);
  }
  return absl::OkStatus();
}

}  // namespace ragkv::blend
