#include "blend/plan_validate.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "blend/cost_model.h"
#include "blend/plan_arch.h"
#include "blend/plan_ops.h"
#include "blend/plan_parallel.h"

namespace ragkv::blend {
namespace {

constexpr int kColumns = 14;

absl::Status ParseRow(const std::vector<std::string>& c, PublishedFigure* f) {
  f->id = c[0];
  f->half = c[1];
  f->model = c[2];
  f->hardware = c[3];
  f->parallel = c[5];
  f->precision = c[6];
  f->metric = c[7];
  f->source = c[12];
  f->setting = c[13];
  if (!absl::SimpleAtoi(c[4], &f->devices) || !absl::SimpleAtoi(c[8], &f->batch) ||
      !absl::SimpleAtoi(c[9], &f->input) || !absl::SimpleAtoi(c[10], &f->output) ||
      !absl::SimpleAtod(c[11], &f->measured_ms) || f->measured_ms <= 0) {
    return absl::InvalidArgumentError("a number column is malformed");
  }
  if (f->half != "fit" && f->half != "test") return absl::InvalidArgumentError("half: fit|test");
  if (f->metric != "ttft" && f->metric != "tpot" && f->metric != "e2e") {
    return absl::InvalidArgumentError("metric: ttft|tpot|e2e");
  }
  if (f->precision != "bf16" && f->precision != "fp16" && f->precision != "fp8" &&
      f->precision != "fp8kv") {
    return absl::InvalidArgumentError("precision: bf16|fp16|fp8|fp8kv");
  }
  if (!ArchPreset(f->model).ok()) return absl::InvalidArgumentError("unknown model " + f->model);
  if (!HardwarePreset(f->hardware).ok()) {
    return absl::InvalidArgumentError("unknown hardware " + f->hardware);
  }
  return ParseParallel(f->parallel).status();
}

// Setup: the per-device architecture and the device with `e` applied.
absl::Status Setup(const PublishedFigure& f, const Efficiency& e, ModelArch* arch,
                   HardwareSpec* hw) {
  absl::StatusOr<ModelArch> a = ArchPreset(f.model);
  absl::StatusOr<HardwareSpec> h = HardwarePreset(f.hardware);
  absl::StatusOr<ParallelKind> kind = ParseParallel(f.parallel);
  if (!a.ok() || !h.ok() || !kind.ok()) return absl::InvalidArgumentError("unknown preset");
  if (f.precision == "fp8" || f.precision == "fp8kv") {
    a->weight_bytes = a->expert_weight_bytes = 1;
    a->precision = Precision::kFp8;
  }
  if (f.precision == "fp8kv") a->kv_bytes = 1;
  absl::StatusOr<ModelArch> s = ShardArch(*a, f.devices, *kind);
  if (!s.ok()) return s.status();
  *arch = *s;
  h->peak_flops *= e.compute_16;
  h->peak_fp8_flops *= e.compute_fp8;
  h->mem_bw *= e.memory;
  h->layer_overhead_s = e.layer_overhead_s;
  *hw = *h;
  return absl::OkStatus();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Loss: sum of squared log errors over the fit half.
double Loss(const std::vector<PublishedFigure>& fit, const Efficiency& e) {
  double loss = 0;
  for (const PublishedFigure& f : fit) {
    absl::StatusOr<double> p = PredictMs(f, e);
    const double r = p.ok() && *p > 0 ? std::log(*p / f.measured_ms) : 10;
    loss += r * r;
  }
  return loss;
}

// Descend: one coordinate over its grid [lo, hi] by `step`, the best kept
// (ties: the first, so the result is deterministic).
void Descend(const std::vector<PublishedFigure>& fit, double lo, double hi, double step, double* x,
             Efficiency* e) {
  double best_x = *x, best = Loss(fit, *e);
  for (double v = lo; v <= hi + 1e-12; v += step) {
    *x = v;
    const double l = Loss(fit, *e);
    if (l < best - 1e-12) best = l, best_x = v;
  }
  *x = best_x;
}

}  // namespace

absl::StatusOr<std::vector<PublishedFigure>> ReadPublishedFigures(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<PublishedFigure> out;
  std::string line;
  bool header = true;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    if (header) {
      header = false;
      continue;
    }
    const std::vector<std::string> c = absl::StrSplit(line, '\t');
    PublishedFigure f;
    absl::Status s = c.size() == kColumns
                         ? ParseRow(c, &f)
                         : absl::InvalidArgumentError(absl::StrCat(c.size(), " columns"));
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": ", s.message()));
    }
    out.push_back(std::move(f));
  }
  return out;
}

absl::StatusOr<double> PredictMs(const PublishedFigure& f, const Efficiency& e) {
  ModelArch a;
  HardwareSpec hw;
  if (absl::Status s = Setup(f, e, &a, &hw); !s.ok()) return s;
  const double ttft = PrefillPhase(a, hw, f.input, f.batch).time_s;
  if (f.metric == "ttft") return ttft * 1e3;
  const double step = DecodePhase(a, hw, f.batch, f.input + f.output / 2).time_s;
  if (f.metric == "tpot") return step * 1e3;
  return (ttft + std::max(0, f.output - 1) * step) * 1e3;
}

absl::StatusOr<ValidationReport> Validate(const std::vector<PublishedFigure>& figures) {
  std::vector<PublishedFigure> fit;
  for (const PublishedFigure& f : figures) {
    if (f.half == "fit") fit.push_back(f);
  }
  if (fit.empty()) return absl::InvalidArgumentError("validate: no figure in the fit half");
  ValidationReport r;
  Efficiency& e = r.fitted;
  for (int round = 0; round < 4; ++round) {
    Descend(fit, 0.20, 1.00, 0.01, &e.compute_16, &e);
    Descend(fit, 0.20, 1.00, 0.01, &e.compute_fp8, &e);
    Descend(fit, 0.30, 1.00, 0.01, &e.memory, &e);
    Descend(fit, 0, 300e-6, 5e-6, &e.layer_overhead_s, &e);
  }
  std::vector<double> fit_err, test_err, raw_err;
  for (const PublishedFigure& f : figures) {
    FigureResult x;
    x.figure = f;
    absl::StatusOr<double> raw = PredictMs(f, Efficiency{});
    absl::StatusOr<double> fitted = PredictMs(f, e);
    if (!raw.ok()) return raw.status();
    if (!fitted.ok()) return fitted.status();
    x.raw_ms = *raw;
    x.fitted_ms = *fitted;
    x.error = x.fitted_ms / f.measured_ms - 1;
    (f.half == "fit" ? fit_err : test_err).push_back(std::fabs(x.error));
    raw_err.push_back(std::fabs(x.raw_ms / f.measured_ms - 1));
    r.results.push_back(std::move(x));
  }
  r.median_abs_error_fit = Median(fit_err);
  r.median_abs_error_test = Median(test_err);
  r.median_abs_error_raw = Median(raw_err);
  return r;
}

void PrintValidation(const ValidationReport& r, std::ostream& out) {
  const Efficiency& e = r.fitted;
  out << absl::StrFormat(
      "fitted on the fit half: %.2f x BF16/FP16 peak, %.2f x FP8 peak, %.2f x HBM bandwidth, "
      "%.0f us per layer\n\n",
      e.compute_16, e.compute_fp8, e.memory, e.layer_overhead_s * 1e6);
  out << "| id | half | model | device | split | prec | metric | batch | in | out | measured "
         "ms | raw ms | fitted ms | error | source |\n"
         "|---|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const FigureResult& x : r.results) {
    const PublishedFigure& f = x.figure;
    out << absl::StrFormat(
        "| %s | %s | %s | %s | %s | %s | %s | %d | %d | %d | %.4g | %.4g | "
        "%.4g | %+.0f%% | %s |\n",
        f.id, f.half, f.model, f.hardware,
        f.devices > 1 ? absl::StrCat(f.parallel, f.devices) : "1", f.precision, f.metric, f.batch,
        f.input, f.output, f.measured_ms, x.raw_ms, x.fitted_ms, x.error * 100, f.source);
  }
  out << absl::StrFormat(
      "\nmedian |error|: test half %.1f%% (held out), fit half %.1f%%, raw roofline (all) "
      "%.1f%%\n",
      r.median_abs_error_test * 100, r.median_abs_error_fit * 100, r.median_abs_error_raw * 100);
}

}  // namespace ragkv::blend
