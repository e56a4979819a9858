// plan_validate.h: the planner against published measurements
// (`ragkv plan --validate FILE`).
//
// FILE (bench/planner/published.tsv) lists published prefill TTFT, decode
// time per output token and batch end-to-end latencies, each with the
// model, device, parallel split, precision, shape, the figure, its half
// ("fit" or "test") and its source URL. The planner predicts each from the
// per-operator phases (blend/plan_ops.h) on the device preset, first raw
// (every operator at the datasheet peak), then with four factors fitted on
// the "fit" half only: the fraction of the dense BF16/FP16 peak and of the
// FP8 peak the GEMMs reach, the fraction of the HBM bandwidth, and the
// per-layer fixed overhead (launches, norms, RoPE: everything the operators
// do not count). The report gives every figure's error and the median
// absolute error per half. Deterministic (grid search); pure computation.
#ifndef RAGKV_BLEND_PLAN_VALIDATE_H_
#define RAGKV_BLEND_PLAN_VALIDATE_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::blend {

struct PublishedFigure {
  std::string id;
  std::string half;      // "fit" or "test"
  std::string model;     // an ArchPreset name
  std::string hardware;  // a HardwarePreset name
  int devices = 1;
  std::string parallel;   // "none", "tp", "ep"
  std::string precision;  // "bf16" / "fp16" (2-byte weights and KV), "fp8" (1-byte
                          // weights, FP8 peak), "fp8kv" (fp8 + 1-byte KV)
  std::string metric;     // "ttft" (prefill of `batch` sequences of `input`
                          // tokens), "tpot" (one decode step at `batch` with
                          // input + output / 2 tokens of context), "e2e" (ttft
                          // + (output - 1) decode steps)
  int batch = 1;
  int input = 0;
  int output = 0;
  double measured_ms = 0;
  std::string source;   // URL
  std::string setting;  // engine, version, what the figure is
};

// Efficiency: the fitted factors (1, 1, 1, preset overhead = raw roofline).
struct Efficiency {
  double compute_16 = 1;   // x dense BF16/FP16 peak
  double compute_fp8 = 1;  // x dense FP8 peak
  double memory = 1;       // x HBM bandwidth
  double layer_overhead_s = 20e-6;
};

struct FigureResult {
  PublishedFigure figure;
  double raw_ms = 0;
  double fitted_ms = 0;
  double error = 0;  // fitted / measured - 1
};

struct ValidationReport {
  Efficiency fitted;
  std::vector<FigureResult> results;
  double median_abs_error_fit = 0;
  double median_abs_error_test = 0;
  double median_abs_error_raw = 0;  // every figure, raw roofline
};

// ReadPublishedFigures: the tab-separated file (a header line naming the
// columns above in order; '#' lines are comments). InvalidArgument naming
// the line for a malformed row, an unknown model / hardware / metric /
// precision / half.
absl::StatusOr<std::vector<PublishedFigure>> ReadPublishedFigures(const std::string& path);

// PredictMs: the planner's prediction of one figure under `e`.
absl::StatusOr<double> PredictMs(const PublishedFigure& f, const Efficiency& e);

// Validate: fits Efficiency on the "fit" figures (coordinate descent over
// fixed grids, minimising the sum of squared log errors) and predicts all.
absl::StatusOr<ValidationReport> Validate(const std::vector<PublishedFigure>& figures);

// PrintValidation: the Markdown table (docs/planner.md "Validation against
// published figures") and the medians.
void PrintValidation(const ValidationReport& report, std::ostream& out);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_PLAN_VALIDATE_H_
