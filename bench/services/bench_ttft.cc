// bench_ttft.cc: the statistics and RunTtftBench, which runs the stages of
// internal/ttft_internal.h in order: workload, tiers, precompute,
// calibration, the matrix, the rows and predictions, the phases after it,
// the report.
#include "bench/services/bench_ttft.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/loading_controller.h"
#include "kernels/tensor.h"
#include "model/loader.h"

namespace ragkv::services {

double Percentile(std::vector<double> s, double q) {
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end());
  q = std::clamp(q, 0.0, 1.0);
  const double h = (static_cast<double>(s.size()) - 1) * q;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (h - static_cast<double>(lo)) * (s[hi] - s[lo]);
}

LatencySummary Summarize(const std::vector<double>& s) {
  LatencySummary r;
  r.count = s.size();
  if (s.empty()) return r;
  double sum = 0;
  for (double x : s) sum += x;
  r.mean = sum / static_cast<double>(s.size());
  r.min = *std::min_element(s.begin(), s.end());
  r.max = *std::max_element(s.begin(), s.end());
  r.p50 = Percentile(s, 0.50);
  r.p95 = Percentile(s, 0.95);
  r.p99 = Percentile(s, 0.99);
  return r;
}

namespace {

using ttft_internal::AddQualityDeltas;
using ttft_internal::AggregateRows;
using ttft_internal::BenchContext;
using ttft_internal::BuildConfigs;
using ttft_internal::BuildMarkdown;
using ttft_internal::BuildWorkload;
using ttft_internal::Calibrate;
using ttft_internal::Calibration;
using ttft_internal::Config;
using ttft_internal::FinishCalibration;
using ttft_internal::FullPrefillP50;
using ttft_internal::MakeController;
using ttft_internal::Phases;
using ttft_internal::PrecomputeAndStore;
using ttft_internal::PrefillBest;
using ttft_internal::PrintCalibration;
using ttft_internal::Prompt;
using ttft_internal::RunLoad;
using ttft_internal::RunMatrix;
using ttft_internal::RunMultiUser;
using ttft_internal::RunSweep;
using ttft_internal::ScratchDir;
using ttft_internal::SetupTiers;
using ttft_internal::StartGrpcPaths;
using ttft_internal::TierSetup;
using ttft_internal::TokenRng;
using ttft_internal::Workload;
using ttft_internal::WriteFiles;

// ValidateOptions: InvalidArgument for bad counts, ratios, path or KV dtype.
absl::Status ValidateOptions(const TtftBenchOptions& o) {
  if (o.prompts <= 0 || o.chunks <= 0 || o.chunk_tokens <= 0 || o.query_tokens <= 0 ||
      o.repeats <= 0 || o.load_requests < 0) {
    return absl::InvalidArgumentError("bench ttft: counts must be positive");
  }
  for (double r : o.ratios) {
    if (!(r >= 0 && r <= 1)) return absl::InvalidArgumentError("bench ttft: ratios in [0, 1]");
  }
  if (o.path != "inproc" && o.path != "grpc" && o.path != "both") {
    return absl::InvalidArgumentError("bench ttft: path must be inproc, grpc or both");
  }
  const bool with_grpc = o.path != "inproc";
  if (with_grpc && o.kv_dtype != kernels::DType::kF16) {
    // The sidecar loads its model with the default f16 KV.
    return absl::InvalidArgumentError("bench ttft: the gRPC path needs --kv-dtype f16");
  }
  return absl::OkStatus();
}

}  // namespace

// The locals below are declared in the order the stages need them and are
// destroyed in reverse: the controller, then the sidecars, the
// redis-server and the stores (TierSetup), the prompts, the scratch
// directory, the blender and the model.
absl::StatusOr<TtftReport> RunTtftBench(const TtftBenchOptions& o, std::ostream& out) {
  RETURN_IF_ERROR(ValidateOptions(o));
  const bool with_grpc = o.path != "inproc";
  TtftReport rep;
  model::LoadOptions lo;
  lo.kv_dtype = o.kv_dtype;
  lo.max_seq_len = o.max_seq_len;
  ASSIGN_OR_RETURN(auto model, model::LoadModel(o.model_spec, lo));
  ASSIGN_OR_RETURN(auto blender, blend::Blender::Create({model.get()}));
  const int vocab = model->config().vocab_size;
  TokenRng rng(o.seed, vocab);

  // Scratch directory.
  ScratchDir scratch;
  RETURN_IF_ERROR(scratch.Make(o.work_dir));
  const std::string& work = scratch.dir();

  // ---- Prompts ----
  ASSIGN_OR_RETURN(Workload workload, BuildWorkload(o, vocab, with_grpc, rng));
  std::vector<Prompt>& prompts = workload.prompts;

  // ---- Tiers; the real path: one sidecar per tier on loopback ----
  TierSetup tiers;
  RETURN_IF_ERROR(SetupTiers(o, work, tiers, rep.notes));
  if (with_grpc) RETURN_IF_ERROR(StartGrpcPaths(o, work, tiers, prompts, rep.notes));

  // ---- Precompute + store (the precompute times calibrate the planner) ----
  double bytes_per_token = 0;
  ASSIGN_OR_RETURN(const PrefillBest prefill,
                   PrecomputeAndStore(*model, tiers, prompts, o.kv_codec, &bytes_per_token));
  rep.notes.push_back(absl::StrFormat("KV records in the in-process tiers: codec %s, %.0f bytes "
                                      "per token",
                                      kvstore::CodecName(o.kv_codec), bytes_per_token));

  // ---- Calibration: CPU ceilings, tier probes, prefill efficiency ----
  Calibration cal;
  RETURN_IF_ERROR(Calibrate(o, *model, work, prompts, tiers, prefill, cal, rep));
  PrintCalibration(o, workload, cal, tiers, rep, out);

  BenchContext b{o, *model, *blender, prompts, tiers, work, rng, rep, out};
  std::unique_ptr<blend::LoadingController> controller = MakeController(b);

  // ---- Matrix: every strategy x tier, interleaved per prompt ----
  const std::vector<Config> configs = BuildConfigs(b, controller.get());
  RETURN_IF_ERROR(RunMatrix(b, configs, controller.get(), cal));
  FinishCalibration(cal, rep, out);

  // ---- Aggregate; quality deltas (optional) ----
  const FullPrefillP50 full = AggregateRows(configs, cal, prompts, rep);
  AddQualityDeltas(o, rep);

  // ---- Load, speedup vs context length, multi-user ----
  Phases phases;
  ASSIGN_OR_RETURN(phases.load_rows, RunLoad(b));
  ASSIGN_OR_RETURN(phases.sweep, RunSweep(b));
  ASSIGN_OR_RETURN(phases.multi_md, RunMultiUser(b));

  // ---- Markdown; files ----
  rep.markdown = BuildMarkdown(o, workload.description, cal, phases, rep);
  out << "\n" << rep.markdown;
  if (!o.out_dir.empty()) RETURN_IF_ERROR(WriteFiles(o, cal, tiers, full, phases, rep, out));
  return rep;
}

}  // namespace ragkv::services
