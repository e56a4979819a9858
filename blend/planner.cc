#include "blend/planner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "blend/blender.h"
#include "blend/plan_parallel.h"

namespace ragkv::blend {
namespace {

constexpr Tier kTiers[] = {Tier::kRam, Tier::kSsd, Tier::kRemote};

// ControllerSelector: the selector the loading controller's decision runs.
const char* ControllerSelector(const Decision& d) {
  return SelectorName(d.lookahead ? Selector::kLookaheadDeviation : Selector::kAttendedDeviation);
}

// Bound of the steady-state layer of a strategy: which of recompute (compute
// or memory roofline) and KV loading dominates, and by how much.
std::string BoundOf(const CostModel& m, double compute_s, const StageCost& stage, double load_s) {
  if (load_s > compute_s) {
    return absl::StrFormat("load x%.1f", compute_s > 0 ? load_s / compute_s : 0.0);
  }
  double ratio = 0;
  const bool cb = m.ComputeBound(stage, &ratio);
  return absl::StrFormat("%s x%.1f", cb ? "compute" : "memory", ratio);
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

AdviceWorkload AdviceOf(const Plan& p) {
  AdviceWorkload w;
  w.context_tokens = p.workload.chunks * p.workload.chunk_tokens;
  w.query_tokens = p.workload.query_tokens;
  w.exact_prefix_tokens = std::min<int64_t>(p.workload.chunk_tokens, w.context_tokens);
  w.decode_batch = p.workload.decode_batch;
  w.ratio = p.workload.r_min > 0 ? p.workload.r_min : 0.15;
  w.tier = p.controller.tier;
  return w;
}

void PrintPhasesTable(const Plan& p, std::ostream& out) {
  if (p.workload.devices > 1) {
    out << absl::StrFormat("\nPer device of %d (%s):\n", p.workload.devices,
                           ParallelName(p.workload.parallel));
  }
  for (const Phase& ph : p.phases) {
    out << absl::StrFormat("\n### %s: %.3f ms, %s-bound%s\n\n", ph.name, ph.time_s * 1e3,
                           ph.bound, ph.fits ? "" : " (does not fit in device memory)");
    out << "| operator | GFLOP | MB | FLOP/B | bound | ms | share |\n"
           "|---|---:|---:|---:|---|---:|---:|\n";
    for (const OpCost& c : ph.ops) {
      out << absl::StrFormat("| %s | %.3f | %.3f | %.1f | %s | %.4f | %.1f%% |\n", c.op,
                             c.flops / 1e9, c.bytes / 1e6, c.intensity, c.bound, c.time_s * 1e3,
                             c.share * 100);
    }
  }
  if (!p.blend_refused.empty()) out << "\nblend refused: " << p.blend_refused << "\n";
  if (!p.recommendations.empty()) out << "\nRecommendations:\n";
  for (const std::string& r : p.recommendations) out << "- " << r << "\n";
}

void PrintPhasesJson(const Plan& p, std::ostream& out) {
  if (p.phases.empty() && p.recommendations.empty() && p.blend_refused.empty()) return;
  out << absl::StrFormat(R"(,"devices":%d,"parallel":"%s")", p.workload.devices,
                         ParallelName(p.workload.parallel));
  out << R"(,"phases":[)";
  for (size_t i = 0; i < p.phases.size(); ++i) {
    const Phase& ph = p.phases[i];
    out << absl::StrFormat(R"(%s{"phase":"%s","time_ms":%.6g,"bound":"%s","fits":%s,)"
                           R"("footprint_bytes":%.6g,"ops":[)",
                           i ? "," : "", JsonEscape(ph.name), ph.time_s * 1e3, ph.bound,
                           ph.fits ? "true" : "false", ph.footprint_bytes);
    for (size_t j = 0; j < ph.ops.size(); ++j) {
      const OpCost& c = ph.ops[j];
      out << absl::StrFormat(R"(%s{"op":"%s","flops":%.6g,"bytes":%.6g,"intensity":%.6g,)"
                             R"("bound":"%s","time_ms":%.6g,"share":%.6g,"compute_ms":%.6g})",
                             j ? "," : "", c.op, c.flops, c.bytes, c.intensity, c.bound,
                             c.time_s * 1e3, c.share, c.compute_s * 1e3);
    }
    out << "]}";
  }
  out << R"(],"recommendations":[)";
  for (size_t i = 0; i < p.recommendations.size(); ++i) {
    out << (i ? "," : "") << '"' << JsonEscape(p.recommendations[i]) << '"';
  }
  out << absl::StrFormat(R"(],"blend_refused":"%s")", JsonEscape(p.blend_refused));
  if (p.capacity) out << R"(,"capacity":)" << CapacityJson(*p.capacity);
}

}  // namespace

void AddArchAnalysis(const ModelArch& full, Plan* plan) {
  const AdviceWorkload w = AdviceOf(*plan);
  absl::StatusOr<ModelArch> arch =
      ShardArch(full, plan->workload.devices, plan->workload.parallel);
  if (!arch.ok()) {
    plan->recommendations = {std::string(arch.status().message())};
    return;
  }
  plan->phases = AnalysedPhases(*arch, plan->hardware, w);
  plan->recommendations = Recommendations(*arch, plan->hardware, w);
  const PlanWorkload& pw = plan->workload;
  if (pw.corpus.corpus_tokens > 0) {
    CorpusWorkload corpus = pw.corpus;
    corpus.chunk_tokens = pw.chunk_tokens;
    plan->capacity = PlanCapacity(full, *arch, pw.devices, plan->hardware, w,
                                  pw.kv_tier.value_or(w.tier), corpus, pw.prices);
    for (std::string& r : CapacityRecommendations(*plan->capacity, corpus, pw.prices)) {
      plan->recommendations.push_back(std::move(r));
    }
  }
  absl::Status reusable = CheckChunkReusable(full);
  plan->blend_refused = reusable.ok() ? "" : std::string(reusable.message());
}

Plan MakeArchPlan(const ModelArch& arch, const HardwareSpec& hw, const PlanWorkload& w,
                  const StoragePrices& prices) {
  if (CheckChunkReusable(arch).ok()) {
    Plan plan = MakePlan(ShapeOfArch(arch), hw, w, prices);
    AddArchAnalysis(arch, &plan);
    return plan;
  }
  Plan plan;
  plan.shape = ShapeOfArch(arch);
  plan.hardware = hw;
  plan.workload = w;
  const int64_t n = w.chunks * w.chunk_tokens + w.query_tokens;
  const Phase pre = PrefillPhase(arch, hw, n);
  plan.rows.push_back({"full-prefill", "-", pre.time_s, 1.0, pre.bound});
  plan.controller.why = "blending refused for this model";
  // KV of the softmax-attention layers only (what a prefix cache would keep).
  plan.kv_bytes_per_token = KvBytes(arch, 1);
  plan.kv_gb_per_million_tokens = plan.kv_bytes_per_token * 1e6 / 1e9;
  const double usd[3] = {prices.ram_usd_per_gb, prices.ssd_usd_per_gb, prices.remote_usd_per_gb};
  for (int t = 0; t < 3; ++t) {
    plan.usd_per_million_tokens[t] = plan.kv_gb_per_million_tokens * usd[t];
  }
  AddArchAnalysis(arch, &plan);
  return plan;
}

Plan MakePlan(const ModelShape& shape, const HardwareSpec& hw, const PlanWorkload& w,
              const StoragePrices& prices) {
  Plan plan;
  plan.shape = shape;
  plan.hardware = hw;
  plan.workload = w;
  CostModel m(shape, hw);
  const int64_t ctx = w.chunks * w.chunk_tokens;
  const int64_t q = w.query_tokens;
  // The Blender's first chunk sits at its own offset: exact, never
  // recomputed; the prefix of prefix caching.
  RequestShape rs;
  rs.context_tokens = ctx;
  rs.query_tokens = q;
  rs.exact_prefix_tokens = std::min<int64_t>(w.chunk_tokens, ctx);
  rs.cached_chunks = w.chunks;
  rs.query_lookahead = true;  // the Blender's default selector
  const double full = m.PredictFullPrefill(rs).total_s;
  const StageCost full_stage = m.PrefillLayer(ctx + q, 0);
  plan.rows.push_back({"full-prefill", "-", full, 1.0,
                       BoundOf(m, m.ComputeSeconds(full_stage), full_stage, 0)});
  for (Tier t : kTiers) {
    const double load = m.LoadSeconds(ctx, t);
    // Prefix caching reuses the leading chunk only.
    const double prefix = m.PredictPrefix(rs, t).total_s;
    const StageCost prefix_stage = m.PrefillLayer(ctx + q - w.chunk_tokens, w.chunk_tokens);
    plan.rows.push_back({"prefix", TierName(t), prefix, full / prefix,
                         BoundOf(m, m.ComputeSeconds(prefix_stage), prefix_stage,
                                 m.LoadSeconds(w.chunk_tokens, t))});
    const double reuse = m.PredictBlend(rs, 0, t).total_s;
    const StageCost reuse_stage = m.SelectiveLayer(q, ctx + q);
    plan.rows.push_back({"full-reuse", TierName(t), reuse, full / reuse,
                         BoundOf(m, m.RecomputeSecondsPerLayer(ctx, q, 0), reuse_stage, load)});
    for (double r : w.ratios) {
      const double b = m.PredictBlend(rs, r, t).total_s;
      const int64_t rows = static_cast<int64_t>(r * static_cast<double>(ctx)) + q;
      const StageCost stage = m.SelectiveLayer(rows, ctx + q);
      plan.rows.push_back({absl::StrFormat("blend r=%.2f", r), TierName(t), b, full / b,
                           BoundOf(m, m.RecomputeSecondsPerLayer(ctx, q, r), stage, load)});
    }
  }
  plan.controller = ChooseRatioAndTier(m, ctx, q, w.r_min, w.r_max,
                                       {Tier::kRam, Tier::kSsd, Tier::kRemote});
  // The default selector's look-ahead, as the loading controller runs it:
  // every layer when its wait hides, or attended-deviation.
  ChooseLookahead(m, ctx, q, 0, &plan.controller);
  RequestShape chosen = rs;
  chosen.query_lookahead = plan.controller.lookahead;
  chosen.lookahead_layers = plan.controller.lookahead_layers;
  const double ttft = m.PredictBlend(chosen, plan.controller.ratio, plan.controller.tier).total_s;
  plan.rows.push_back({absl::StrFormat("controller r=%.2f", plan.controller.ratio),
                       TierName(plan.controller.tier), ttft, full / ttft,
                       plan.controller.load_s_per_layer > plan.controller.recompute_s_per_layer
                           ? "load"
                           : "recompute"});
  plan.kv_bytes_per_token = m.KvBytesPerLayer(1) * shape.layers;
  plan.kv_gb_per_million_tokens = plan.kv_bytes_per_token * 1e6 / 1e9;
  plan.usd_per_million_tokens[static_cast<int>(Tier::kRam)] =
      plan.kv_gb_per_million_tokens * prices.ram_usd_per_gb;
  plan.usd_per_million_tokens[static_cast<int>(Tier::kSsd)] =
      plan.kv_gb_per_million_tokens * prices.ssd_usd_per_gb;
  plan.usd_per_million_tokens[static_cast<int>(Tier::kRemote)] =
      plan.kv_gb_per_million_tokens * prices.remote_usd_per_gb;
  return plan;
}

void PrintPlanTable(const Plan& p, std::ostream& out) {
  const auto& w = p.workload;
  out << absl::StrFormat(
      "model %s (L=%d dim=%d heads=%d kv_heads=%d ffn=%d) on %s: %d chunks x %d tokens + %d "
      "query tokens\n\n",
      p.shape.name, p.shape.layers, p.shape.dim, p.shape.heads, p.shape.kv_heads, p.shape.ffn,
      p.hardware.name, w.chunks, w.chunk_tokens, w.query_tokens);
  out << "| strategy | tier | TTFT ms | speedup | bound |\n|---|---|---:|---:|---|\n";
  for (const auto& r : p.rows) {
    out << absl::StrFormat("| %s | %s | %.2f | %.2fx | %s |\n", r.strategy, r.tier,
                           r.ttft_s * 1e3, r.speedup, r.bound);
  }
  out << absl::StrFormat("\ncontroller: r=%.2f tier=%s selector=%s lookahead_layers=%d (%s)\n",
                         p.controller.ratio, TierName(p.controller.tier),
                         ControllerSelector(p.controller), p.controller.lookahead_layers,
                         p.controller.why);
  out << absl::StrFormat(
      "KV storage: %.1f KiB/token, %.2f GB per million tokens; capacity $ per million tokens: "
      "ram %.2f, ssd %.2f, redis %.2f\n",
      p.kv_bytes_per_token / 1024, p.kv_gb_per_million_tokens, p.usd_per_million_tokens[0],
      p.usd_per_million_tokens[1], p.usd_per_million_tokens[2]);
  PrintPhasesTable(p, out);
}

void PrintPlanJson(const Plan& p, std::ostream& out) {
  out << absl::StrFormat(R"({"model":"%s","hardware":"%s","chunks":%d,"chunk_tokens":%d,)"
                         R"("query_tokens":%d,"rows":[)",
                         JsonEscape(p.shape.name), JsonEscape(p.hardware.name), p.workload.chunks,
                         p.workload.chunk_tokens, p.workload.query_tokens);
  for (size_t i = 0; i < p.rows.size(); ++i) {
    const auto& r = p.rows[i];
    out << absl::StrFormat(R"(%s{"strategy":"%s","tier":"%s","ttft_ms":%.6g,"speedup":%.6g,)"
                           R"("bound":"%s"})",
                           i ? "," : "", r.strategy, r.tier, r.ttft_s * 1e3, r.speedup, r.bound);
  }
  out << absl::StrFormat(
      R"(],"controller":{"ratio":%.4g,"tier":"%s","selector":"%s","lookahead_layers":%d,)"
      R"("why":"%s"},"kv_bytes_per_token":%.6g,)"
      R"("usd_per_million_tokens":{"ram":%.6g,"ssd":%.6g,"redis":%.6g})",
      p.controller.ratio, TierName(p.controller.tier), ControllerSelector(p.controller),
      p.controller.lookahead_layers, JsonEscape(p.controller.why), p.kv_bytes_per_token,
      p.usd_per_million_tokens[0], p.usd_per_million_tokens[1], p.usd_per_million_tokens[2]);
  PrintPhasesJson(p, out);
  out << "}\n";
}

}  // namespace ragkv::blend
