// ttft_runner.cc: the measurements of `ragkv bench ttft` (internal/ttft_internal.h):
// one in-process request, the loading controller, and the matrix of
// strategies x tiers (in process and over gRPC), interleaved per prompt.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/kv_source.h"
#include "blend/loading_controller.h"
#include "blend/quality_gate.h"
#include "pipeline/pipeline.h"

namespace ragkv::services::ttft_internal {

using blend::BlendOptions;
using blend::BlendResult;
using blend::BlendSegment;
using blend::CpuCeilings;
using blend::CpuMeasureOptions;
using blend::MeasureCpu;
using blend::SegmentKind;
using blend::Strategy;

// ---- One request -----------------------------------------------------------

namespace {

// NullSink: the in-process rows keep the fused KV where the pipeline built
// it (the gRPC rows measure the export and the transport).
class NullSink final : public pipeline::LayerSink {
 public:
  absl::Status OnPrompt(const pipeline::PromptInfo&) override { return absl::OkStatus(); }
  absl::Status OnLayer(int, const model::KVCache&, absl::Span<const int32_t>) override {
    return absl::OkStatus();
  }
  absl::Status OnRestart(const pipeline::FailedLoad&) override { return absl::OkStatus(); }
};

pipeline::Mode ModeOf(const Request& rq) {
  if (rq.controller) return pipeline::Mode::kAuto;
  switch (rq.strategy) {
    case Strategy::kFullPrefill: return pipeline::Mode::kFullPrefill;
    case Strategy::kPrefixReuse: return pipeline::Mode::kPrefixReuse;
    case Strategy::kFullReuse: return pipeline::Mode::kFullReuse;
    default: return pipeline::Mode::kCacheBlend;
  }
}

// BenchGate: the gate a sidecar without a calibration record serves with
// (blend/quality_gate.h: the uncalibrated default).
const blend::GateDecision& BenchGate() {
  static const blend::GateDecision* const kGate = new blend::GateDecision(
      blend::DecideGate(absl::NotFoundError("bench ttft: no calibration record")));
  return *kGate;
}

// PromptOf: the prompt's first n chunks as documents (their stored KV found
// by content, as a served request finds it), then the query.
pipeline::Prompt PromptOf(const Prompt& p, int n) {
  pipeline::Prompt out;
  for (int i = 0; i < n; ++i) {
    pipeline::Segment& s = out.segments.emplace_back();
    s.tokens = p.chunks[i];
    s.document = true;
  }
  out.segments.emplace_back().tokens = p.query;
  return out;
}

}  // namespace

absl::StatusOr<Outcome> RunRequest(const blend::Blender& blender,
                                   blend::LoadingController* controller,
                                   const model::Model& model, const Prompt& p, const Request& rq) {
  const int n = rq.chunks < 0 ? static_cast<int>(p.chunks.size()) : rq.chunks;
  pipeline::Pipeline::Options po;
  po.model = &model;
  po.blender = &blender;
  po.controller = rq.controller ? controller : nullptr;
  po.store = rq.tier != nullptr ? rq.tier->store.get() : nullptr;
  po.quality_gate = &BenchGate();
  po.prefix_cache.block_tokens = kPrefixBlockTokens;
  ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> pipe, pipeline::Pipeline::Create(po));
  pipeline::RequestOptions ro;
  ro.mode = ModeOf(rq);
  ro.ratio = rq.gate ? 0 : rq.ratio;
  ro.pinned = !rq.gate;
  const pipeline::Prompt prompt = PromptOf(p, n);
  NullSink sink;
  const double t0 = Now();
  ASSIGN_OR_RETURN(pipeline::RequestResult r, pipe->Run(prompt, ro, &sink));
  Outcome o;
  o.ttft_s = Now() - t0;
  pipe->DrainStoreBack();  // store-back runs off the request's path
  const bool reads_all = rq.strategy != Strategy::kFullPrefill && rq.strategy != Strategy::kPrefixReuse;
  if (rq.tier != nullptr && reads_all && r.prefix_tokens == 0 && static_cast<int>(r.tiers.size()) < n) {
    return absl::InternalError(absl::StrCat("bench ttft: ", n - r.tiers.size(),
                                            " chunks missing from tier ", rq.tier->name));
  }
  for (int i = 0; i < n; ++i) o.context += static_cast<int64_t>(p.chunks[i].size());
  o.open_s = std::max(0.0, r.ms.fetch / 1e3 - r.timings.load_s);
  o.ratio = r.ratio;
  o.stages = r.timings;
  o.recomputed = r.recomputed_rows;
  o.prefix_tokens = r.prefix_tokens;
  o.kv_bytes = r.kv_bytes_read;
  const model::ModelConfig& cfg = model.config();
  o.kv_bytes += static_cast<uint64_t>(r.prefix_tokens) * cfg.n_layers * 2 * cfg.n_kv_heads *
                cfg.head_dim * kernels::DTypeSize(cfg.kv_dtype);
  o.tier_index = r.tiers;
  return o;
}

// ---- Controller ------------------------------------------------------------

std::unique_ptr<blend::LoadingController> MakeController(BenchContext& b) {
  const TtftBenchOptions& o = b.o;
  std::unique_ptr<blend::LoadingController> controller;
  if (o.with_controller && !b.tiers.stores.empty()) {
    blend::ControllerOptions co;
    co.model = &b.model;
    co.r_min = std::min(o.r_min, 0.5);
    co.r_max = 0.5;
    for (auto& t : b.tiers.stores) {
      co.tier_bytes_per_s[static_cast<int>(t->tier)] = t->probe_bytes_per_s;
    }
    absl::StatusOr<std::unique_ptr<blend::LoadingController>> c =
        blend::LoadingController::Create(co);
    if (c.ok()) {
      controller = *std::move(c);
    } else {
      b.rep.notes.push_back("controller strategy skipped: " + c.status().ToString());
      b.out << "# controller strategy skipped: " << c.status() << "\n";
    }
  }
  return controller;
}

// ---- Matrix: every strategy x tier, interleaved per prompt ----

std::vector<Config> BuildConfigs(BenchContext& b, const blend::LoadingController* controller) {
  const TtftBenchOptions& o = b.o;
  TierSetup& tiers = b.tiers;
  const bool with_grpc = o.path != "inproc";
  const bool with_inproc = o.path != "grpc";
  std::vector<Config> configs;
  // Each gRPC row runs right after its in-process twin (same strategy, same
  // tier); the controller's gRPC row is BLEND_MODE_AUTO (the sidecar's own
  // loading controller).
  auto add = [&configs, &tiers, with_inproc](const std::string& strategy, const Request& rq) {
    if (with_inproc || rq.tier == nullptr) configs.push_back({strategy, rq, false});
    if (tiers.GrpcFor(rq.tier) != nullptr) configs.push_back({strategy, rq, true});
  };
  add("full-prefill", Request{Strategy::kFullPrefill, false, 0, nullptr, -1});
  for (auto& t : tiers.stores) {
    if (o.with_prefix) add("prefix", Request{Strategy::kPrefixReuse, false, 0, t.get(), -1});
    add("full-reuse", Request{Strategy::kFullReuse, false, 0, t.get(), -1});
    for (double r : o.ratios) add("blend", Request{Strategy::kCacheBlend, false, r, t.get(), -1});
    // What the quality gate would choose, strategy and ratio left to the
    // server (in process; the rows above pin theirs).
    if (with_inproc) {
      configs.push_back({"gate", Request{Strategy::kCacheBlend, false, 0, t.get(), -1, true}, false});
    }
    if ((controller && with_inproc) || with_grpc) {
      Request rq{Strategy::kCacheBlend, true, 0, t.get(), -1};
      if (controller && with_inproc) configs.push_back({"controller", rq, false});
      if (tiers.GrpcFor(t.get()) != nullptr) configs.push_back({"controller", rq, true});
    }
  }
  return configs;
}

namespace {

// MatrixSample: the fields every matrix sample shares.
TtftSample MatrixSample(const Config& c, size_t pi, int r, double ratio) {
  TtftSample s;
  s.phase = "matrix";
  s.strategy = c.strategy;
  s.tier = c.rq.tier ? c.rq.tier->name : "-";
  s.ratio = ratio;
  s.prompt = static_cast<int>(pi);
  s.rep = r;
  return s;
}

// Record: logs a matrix sample (one line, `suffix` appended) and keeps it.
void Record(BenchContext& b, TtftSample s, const std::string& suffix) {
  b.out << absl::StrFormat("  %-16s %-5s prompt %d rep %d: %8.1f ms%s\n",
                           StrategyLabel(s.strategy, s.ratio), s.tier, s.prompt, s.rep,
                           s.ttft_s * 1e3, suffix);
  b.out.flush();
  b.rep.samples.push_back(std::move(s));
}

// RunGrpcConfig: one gRPC row's request on prompt `pi` (pass r) through its
// sidecar, recorded. `fused_wire_bytes`: the fused KV bytes the engine
// receives. Errors: those of Generate.
absl::Status RunGrpcConfig(BenchContext& b, const Config& c, size_t pi, int r,
                           double fused_wire_bytes) {
  std::vector<Prompt>& prompts = b.prompts;
  GrpcTtftPath* path = b.tiers.GrpcFor(c.rq.tier);
  const std::string tname = c.rq.tier ? c.rq.tier->name : "";
  std::vector<uint64_t> ids;
  const auto& cat = tname.empty() ? prompts[pi].cat : prompts[pi].cat_by_tier[tname];
  for (const CatalogueChunk& cc : cat) ids.push_back(cc.chunk_id);
  if (tname == "ssd") FadviseTree(path->data_dir() + "/kv");
  const bool auto_ratio = c.strategy == "controller";
  ASSIGN_OR_RETURN(GrpcOutcome g, path->Generate(ids, prompts[pi].query, c.rq.strategy,
                                                 c.rq.ratio, auto_ratio));
  TtftSample s = MatrixSample(c, pi, r, auto_ratio ? g.ratio : c.rq.ratio);
  s.path = "grpc";
  s.context_tokens = g.context_tokens;
  s.recomputed_rows = g.recomputed_tokens;
  s.ttft_s = g.ttft_s;
  s.rpc_engine_ttft_s = g.engine_ttft_s;
  s.rpc_fetch_s = g.fetch_s;
  s.rpc_blend_s = g.blend_s;
  s.rpc_prefill_s = g.query_prefill_s;
  s.wire_bytes =
      c.rq.strategy == Strategy::kFullPrefill ? 0 : static_cast<uint64_t>(fused_wire_bytes);
  Record(b, std::move(s), auto_ratio ? " (grpc) -- sidecar controller: " + g.controller_reason
                                     : std::string(" (grpc)"));
  return absl::OkStatus();
}

// RunInprocConfig: one in-process row's request on prompt `pi` (pass r),
// cold for SSD, recorded. Errors: those of RunRequest.
absl::Status RunInprocConfig(BenchContext& b, const Config& c, size_t pi, int r,
                             blend::LoadingController* controller) {
  // Every row starts from "the previous request was prompt i - 1": the
  // prefix blocks an earlier row of this prompt stored back are forgotten
  // (a prefix row stores the whole context's blocks; the blend rows after
  // it would otherwise be exact-prefix hits).
  if (c.rq.tier != nullptr) {
    RETURN_IF_ERROR(ForgetUnsharedPrefix(c.rq.tier->store.get(), b.model.fingerprint(),
                                         ContextTokens(b.prompts[pi]),
                                         ContextTokens(Previous(b.prompts, pi))));
  }
  b.tiers.MakeCold(c.rq.tier);
  ASSIGN_OR_RETURN(Outcome oc, RunRequest(b.blender, controller, b.model, b.prompts[pi], c.rq));
  const bool auto_ratio = c.strategy == "controller" || c.strategy == "gate";
  TtftSample s = MatrixSample(c, pi, r, auto_ratio ? oc.ratio : c.rq.ratio);
  oc.FillSample(&s);
  Record(b, std::move(s),
         c.rq.strategy == Strategy::kPrefixReuse
             ? absl::StrFormat(" (%d prefix tokens from stored blocks)", oc.prefix_tokens)
             : std::string());
  return absl::OkStatus();
}

// NotePrefixState: what the prefix rows can reuse. In process, each prompt
// finds the blocks it shares with the previous prompt (ttft_prefix.cc); the
// gRPC sidecars run without store-back (no background work while timed), so
// their prefix cache stays empty, which is the same state only when
// consecutive prompts share no whole block: otherwise a note says so.
void NotePrefixState(BenchContext& b, const std::vector<Config>& configs) {
  const bool grpc_prefix = std::any_of(configs.begin(), configs.end(), [](const Config& c) {
    return c.grpc && c.rq.strategy == Strategy::kPrefixReuse;
  });
  int64_t shared = 0;
  for (size_t i = 0; i < b.prompts.size(); ++i) shared += SharedWithPrevious(b.prompts, i);
  b.out << absl::StrFormat("# prefix rows: prompts share %d leading tokens (whole blocks) with "
                           "the previous prompt in all\n", shared);
  if (grpc_prefix && shared > 0) {
    const std::string note = absl::StrFormat(
        "gRPC prefix rows: the sidecars' prefix cache is empty (no store-back while timed), but "
        "consecutive prompts share %d leading tokens a live sidecar would serve", shared);
    b.rep.notes.push_back(note);
    b.out << "# " << note << "\n";
  }
}

}  // namespace

absl::Status RunMatrix(BenchContext& b, const std::vector<Config>& configs,
                       blend::LoadingController* controller, Calibration& cal) {
  const TtftBenchOptions& o = b.o;
  const blend::ModelShape& shape = cal.shape;
  // Bytes of the fused KV the engine receives per request: the sidecar's
  // default wire dtype, f16 (SidecarOptions::engine_kv_wire_dtype).
  const double fused_wire_bytes = 2.0 * shape.layers * shape.kv_heads * shape.head_dim *
                                  static_cast<double>(cal.context_tokens + cal.query_tokens) * 2;
  b.out << absl::StrFormat("# matrix: %d configurations x %d prompts x %d repeats\n",
                           configs.size(), b.prompts.size(), o.repeats);
  NotePrefixState(b, configs);
  // Kernel rates are re-measured between requests (every
  // `calibrate_every` configurations) so that they see the same machine load
  // as the requests; the prediction uses their field-wise median.
  std::vector<CpuCeilings>& kernel_samples = cal.kernel_samples;
  CpuMeasureOptions recal = cal.cmo;
  recal.file_bytes = 0;
  recal.copy_bytes = std::min<size_t>(recal.copy_bytes, size_t{32} << 20);
  int since_cal = 0;
  for (int r = 0; r < o.repeats; ++r) {
    for (size_t pi = 0; pi < b.prompts.size(); ++pi) {
      for (const Config& c : configs) {
        if (o.calibrate_every > 0 && ++since_cal >= o.calibrate_every) {
          since_cal = 0;
          ASSIGN_OR_RETURN(CpuCeilings k, MeasureCpu(recal));
          kernel_samples.push_back(std::move(k));
        }
        if (c.grpc) {
          RETURN_IF_ERROR(RunGrpcConfig(b, c, pi, r, fused_wire_bytes));
          continue;
        }
        RETURN_IF_ERROR(RunInprocConfig(b, c, pi, r, controller));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ragkv::services::ttft_internal
