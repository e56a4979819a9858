// report.cc: the `serve ...` lines, CSV, JSON and the TTFT-vs-clients plot
// of `ragkv bench serve` (bench_serve.h).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/serve/bench_serve.h"

namespace ragkv::bench_serve {
namespace {

std::string Line(const CellResult& c) {
  return absl::StrFormat(
      "serve server=%s workload=%s clients=%d ttft_p50_ms=%.1f ttft_p99_ms=%.1f e2e_p50_ms=%.1f "
      "rps=%.3f out_tok_s=%.1f cached_frac=%.3f errors=%d",
      c.server, c.workload, c.clients, c.ttft_p50_ms, c.ttft_p99_ms, c.e2e_p50_ms, c.rps,
      c.out_tok_s, c.cached_frac, c.errors);
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) return absl::InternalError("cannot write " + path);
  return absl::OkStatus();
}

std::string Csv(const ServeBenchReport& r) {
  std::string s =
      "server,workload,clients,requests,errors,ttft_p50_ms,ttft_p99_ms,e2e_p50_ms,rps,out_tok_s,"
      "cached_frac,mean_prompt_tokens,blend_p50_ms,prefill_p50_ms,recomputed_p50,prefilled_p50\n";
  for (const CellResult& c : r.cells) {
    absl::StrAppendFormat(
        &s, "%s,%s,%d,%d,%d,%.2f,%.2f,%.2f,%.4f,%.2f,%.4f,%.1f,%.1f,%.1f,%.0f,%.0f\n", c.server,
        c.workload, c.clients, c.requests, c.errors, c.ttft_p50_ms, c.ttft_p99_ms, c.e2e_p50_ms,
        c.rps, c.out_tok_s, c.cached_frac, c.mean_prompt_tokens, c.blend_p50_ms, c.prefill_p50_ms,
        c.recomputed_p50, c.prefilled_p50);
  }
  return s;
}

std::string Json(const ServeBenchReport& r) {
  nlohmann::json cells = nlohmann::json::array();
  for (const CellResult& c : r.cells) {
    cells.push_back({{"server", c.server},
                     {"workload", c.workload},
                     {"clients", c.clients},
                     {"requests", c.requests},
                     {"errors", c.errors},
                     {"ttft_p50_ms", c.ttft_p50_ms},
                     {"ttft_p99_ms", c.ttft_p99_ms},
                     {"e2e_p50_ms", c.e2e_p50_ms},
                     {"rps", c.rps},
                     {"out_tok_s", c.out_tok_s},
                     {"cached_frac", c.cached_frac},
                     {"mean_prompt_tokens", c.mean_prompt_tokens},
                     {"blend_p50_ms", c.blend_p50_ms},
                     {"prefill_p50_ms", c.prefill_p50_ms},
                     {"recomputed_p50", c.recomputed_p50},
                     {"prefilled_p50", c.prefilled_p50},
                     {"reorder_runs", c.reorder_runs},
                     {"reorder_hits", c.reorder_hits},
                     {"reorder_gain_mean", c.reorder_gain_mean},
                     {"stored_prefix_mean", c.stored_prefix_mean},
                     {"first_error", c.first_error},
                     {"first_content", c.first_content}});  // per request, for paired reads
  }
  nlohmann::json j = {{"description", r.description},
                      {"cells", cells},
                      {"first_token_agreement", r.first_token_agreement},
                      {"agreement_n", r.agreement_n},
                      {"notes", r.notes}};
  for (const auto& [server, a] : r.agreements) {
    j["agreements"][server] = {{"first_token_agreement", a.first}, {"n", a.second}};
  }
  return j.dump(2) + "\n";
}

// Plot: TTFT p50 and p99 of the recombining workload against clients, one
// pair of lines per server. Errors: gnuplot (the caller notes them).
absl::Status Plot(const std::string& dir, const ServeBenchReport& r) {
  std::set<std::string> servers;
  for (const CellResult& c : r.cells) servers.insert(c.server);
  std::string plot;
  int block = 0;
  std::ofstream dat(dir + "/serve_ttft.dat");
  for (const std::string& s : servers) {
    dat << "# " << s << "\n";
    for (const CellResult& c : r.cells) {
      if (c.server == s && c.workload == "recombine") {
        dat << c.clients << " " << c.ttft_p50_ms << " " << c.ttft_p99_ms << "\n";
      }
    }
    dat << "\n\n";
    absl::StrAppend(&plot, plot.empty() ? "" : ", ", "'", dir, "/serve_ttft.dat' index ", block,
                    " using 1:2 with linespoints lw 2 title '", s, " p50', '", dir,
                    "/serve_ttft.dat' index ", block, " using 1:3 with linespoints dt 2 title '", s,
                    " p99'");
    ++block;
  }
  dat.close();
  const std::string term =
      std::system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0 ? "pngcairo" : "png";
  const std::string gp = dir + "/serve_ttft.gp";
  absl::Status w = WriteText(
      gp, absl::StrCat("set terminal ", term, " size 900,560\nset output '", dir,
                       "/serve_ttft.png'\nset title 'TTFT under closed-loop load (recombining "
                       "passages)'\nset xlabel 'concurrent clients'\nset ylabel 'TTFT (ms)'\n"
                       "set yrange [0:*]\nset key top left\nset grid\nplot ",
                       plot, "\n"));
  if (!w.ok()) return w;
  if (std::system(absl::StrCat("gnuplot '", gp, "' 2>'", dir, "/serve_ttft.log'").c_str()) != 0) {
    return absl::InternalError("gnuplot failed or is missing (see serve_ttft.log)");
  }
  return absl::OkStatus();
}

}  // namespace

std::string FormatServeReport(const ServeBenchReport& r) {
  std::ostringstream out;
  out << "# bench serve: " << r.description << "\n";
  for (const CellResult& c : r.cells) {
    out << Line(c) << "\n";
    if (c.blend_p50_ms >= 0) {
      out << absl::StrFormat(
          "#   ragkv breakdown p50: blend %.0f ms, llama.cpp prefill %.0f ms, "
          "%.0f rows recomputed, %.0f prefilled\n",
          c.blend_p50_ms, c.prefill_p50_ms, c.recomputed_p50, c.prefilled_p50);
    }
    if (c.reorder_runs > 0) {
      out << absl::StrFormat(
          "#   reorder: prefix grew in %d of %d requests (%.0f%%), mean gain %.1f tokens; rows "
          "served from stored prefix blocks mean %.1f\n",
          c.reorder_hits, c.reorder_runs, 100.0 * c.reorder_hits / c.reorder_runs,
          c.reorder_gain_mean, c.stored_prefix_mean);
    } else if (c.stored_prefix_mean >= 0) {
      out << absl::StrFormat("#   rows served from stored prefix blocks mean %.1f\n",
                             c.stored_prefix_mean);
    }
    if (!c.first_error.empty()) out << "#   first error: " << c.first_error << "\n";
  }
  if (r.first_token_agreement >= 0) {
    out << absl::StrFormat(
        "serve quality server=ragkv vs=ragkv-local first_token_agreement=%.3f "
        "n=%d\n",
        r.first_token_agreement, r.agreement_n);
  }
  for (const auto& [server, a] : r.agreements) {
    out << absl::StrFormat("serve quality server=%s vs=ragkv-local first_token_agreement=%.3f n=%d\n",
                           server, a.first, a.second);
  }
  for (const std::string& n : r.notes) out << "# " << n << "\n";
  for (const std::string& f : r.files) out << "# wrote " << f << "\n";
  return out.str();
}

absl::Status WriteServeFiles(const std::string& out_dir, ServeBenchReport* r) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  r->files = {out_dir + "/serve.csv", out_dir + "/serve.json"};
  if (absl::Status p = Plot(out_dir, *r); p.ok()) {
    r->files.push_back(out_dir + "/serve_ttft.png");
  } else {
    r->notes.push_back("no PNG: " + std::string(p.message()));
  }
  if (absl::Status s = WriteText(out_dir + "/serve.csv", Csv(*r)); !s.ok()) return s;
  return WriteText(out_dir + "/serve.json", Json(*r));
}

}  // namespace ragkv::bench_serve
