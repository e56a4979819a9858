#include "bench/blend/bench_oracle.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "bench/blend/oracle_blend.h"
#include "bench/blend/oracle_selectors.h"
#include "bench/blend/quality_prompts.h"
#include "blend/quality_gate.h"
#include "model/tokenizer.h"

namespace ragkv::blend {
namespace {

const std::set<std::string> kRankers = {"blender",         "replay", "future-dev",
                                        "future-attended", "effect", "greedy",
                                        "attended-deviation", "attended-linear",
                                        "future-dev-x-att", "dev-x-future-att", "dev-x-ahead-att"};

// IsStopRule: "mass@M", "abs@T" or "res@E" (oracle_selectors.h StopRule).
bool IsStopRule(const std::string& name) {
  return name.rfind("mass@", 0) == 0 || name.rfind("abs@", 0) == 0 || name.rfind("res@", 0) == 0 ||
         name.rfind("pow@", 0) == 0;
}

// Scores: per prompt, [ranker][ratio index] -> (kl, top1).
struct Scores {
  std::map<std::string, std::vector<std::vector<Agreement>>> by_ranker;  // [ratio][prompt]
  std::vector<double> reuse_kl, reuse_top1;
  // name (adaptive/m=M, a stop rule) -> (kl, r) per prompt
  std::map<std::string, std::vector<std::pair<double, double>>> adaptive;
};

// Oracle: one prompt's truth, cache and swap model.
struct Oracle {
  OracleLayout lay;
  std::vector<float> ref;
  std::unique_ptr<BlendResult> truth, reuse;
  std::unique_ptr<SwapModel> swap;
  std::map<int, std::vector<float>> effect;  // check layer -> per position
  std::vector<int32_t> greedy;               // positions, in the greedy order
  const model::Model* model = nullptr;
};

absl::StatusOr<BlendResult> BlendPrompt(const Blender& b, const PromptData& p, BlendOptions o) {
  return BlendPrompt(b, p, p.kv, std::move(o));
}

// Effects: for every check layer l, the KL each row removes alone when
// exact at layers > l.
absl::Status Effects(const std::vector<CheckLayer>& schedule, int n_layers, Oracle* o) {
  ASSIGN_OR_RETURN(const double base, o->swap->Kl({}, n_layers));
  for (const CheckLayer& c : schedule) {
    std::vector<float>& e = o->effect[c.layer];
    e.assign(o->lay.query_begin, 0.0f);
    if (c.layer + 1 >= n_layers) continue;
    for (int64_t j = o->lay.first_selectable; j < o->lay.query_begin; ++j) {
      const int32_t row = static_cast<int32_t>(j);
      ASSIGN_OR_RETURN(const double kl, o->swap->Kl({&row, 1}, c.layer + 1));
      e[j] = static_cast<float>(base - kl);
    }
  }
  return absl::OkStatus();
}

// Greedy: `steps` rows, each the one that lowers the KL most with the rows
// before it (exact at every layer after the exact ones).
absl::Status Greedy(int64_t steps, int n_layers, Oracle* o) {
  std::vector<int32_t>& s = o->greedy;
  std::vector<uint8_t> taken(o->lay.query_begin, 0);
  for (int64_t k = 0; k < steps; ++k) {
    double best = 1e300;
    int32_t pick = -1;
    s.push_back(0);
    for (int64_t j = o->lay.first_selectable; j < o->lay.query_begin; ++j) {
      if (taken[j]) continue;
      s.back() = static_cast<int32_t>(j);
      ASSIGN_OR_RETURN(const double kl, o->swap->Kl(s, 0));
      if (kl < best) best = kl, pick = static_cast<int32_t>(j);
    }
    if (pick < 0) {
      s.pop_back();
      break;
    }
    s.back() = pick;
    taken[pick] = 1;
  }
  (void)n_layers;
  return absl::OkStatus();
}

// MakeRanker: the oracle ranker `name` over `o` (the Blender's recomputed
// rows `blended` for replay).
Ranker MakeRanker(const std::string& name, const Oracle& o, int n_layers,
                  const std::vector<std::vector<int32_t>>* blended) {
  if (name == "replay") {
    return [blended](const CheckState& st, float* score) {
      const auto& keep = (*blended)[st.layer];
      for (size_t i = 0; i < st.cand_pos.size(); ++i) {
        score[i] = std::binary_search(keep.begin(), keep.end(), st.cand_pos[i]) ? 1.0f : 0.0f;
      }
      return absl::OkStatus();
    };
  }
  if (name == "effect") {
    return [&o](const CheckState& st, float* score) {
      const auto& e = o.effect.at(st.layer);
      for (size_t i = 0; i < st.cand_pos.size(); ++i) score[i] = e[st.cand_pos[i]];
      return absl::OkStatus();
    };
  }
  if (name == "greedy") {
    return [&o](const CheckState& st, float* score) {
      std::vector<float> rank(o.lay.query_begin, -1e30f);
      for (size_t k = 0; k < o.greedy.size(); ++k) rank[o.greedy[k]] = -static_cast<float>(k);
      for (size_t i = 0; i < st.cand_pos.size(); ++i) score[i] = rank[st.cand_pos[i]];
      return absl::OkStatus();
    };
  }
  if (name == "future-dev-x-att" || name == "dev-x-future-att" || name == "dev-x-ahead-att") {
    // Hybrids: which half of future-attended a server misses. One factor
    // is summed over the layers after the check (the truth's deviation or
    // query attention, or the look-ahead's attention), the other is what
    // the check layer measures (oracle_selectors.h Errors).
    const bool future_dev = name == "future-dev-x-att";
    const model::Model* m = o.model;
    const auto& later = future_dev                    ? o.swap->Deviation()
                        : name == "dev-x-future-att" ? o.swap->QueryMass()
                                                     : o.swap->AheadMass();
    return [&o, &later, m, future_dev, n_layers](const CheckState& st,
                                                  float* score) -> absl::Status {
      ASSIGN_OR_RETURN(RowErrors e, Errors(*m, o.lay.query_begin, st));
      const auto& truth = later;
      for (size_t i = 0; i < st.cand_pos.size(); ++i) {
        double f = 0;
        for (int l = st.layer + 1; l < n_layers; ++l) f += truth[l][st.cand_pos[i]];
        score[i] = static_cast<float>(f * (future_dev ? e.att[i] : e.dev[i]));
      }
      return absl::OkStatus();
    };
  }
  const bool attended = name == "future-attended";
  return [&o, attended, n_layers](const CheckState& st, float* score) {
    const auto& dev = o.swap->Deviation();
    const auto& mass = o.swap->QueryMass();
    std::fill(score, score + st.cand_pos.size(), 0.0f);
    for (int l = st.layer + 1; l < n_layers; ++l) {
      double tot = 0;
      for (int64_t j = o.lay.first_selectable; j < o.lay.query_begin; ++j) {
        tot += dev[l][j] * (attended ? mass[l][j] : 1.0);
      }
      if (tot <= 0) continue;
      for (size_t i = 0; i < st.cand_pos.size(); ++i) {
        const int32_t j = st.cand_pos[i];
        score[i] += static_cast<float>(dev[l][j] * (attended ? mass[l][j] : 1.0) / tot);
      }
    }
    return absl::OkStatus();
  };
}

absl::StatusOr<Oracle> MakeOracle(const Blender& b, const PromptData& p, const QualityBenchOptions& qo,
                                  const std::set<std::string>& want) {
  const model::Model& m = b.model();
  const int L = m.config().n_layers;
  Oracle o;
  o.model = &m;
  o.lay.tokens = p.prefix;
  for (const auto& c : p.chunks) o.lay.tokens.insert(o.lay.tokens.end(), c.begin(), c.end());
  o.lay.first_selectable = static_cast<int64_t>(p.prefix.size());
  o.lay.query_begin = static_cast<int64_t>(o.lay.tokens.size());
  o.lay.tokens.insert(o.lay.tokens.end(), p.query.begin(), p.query.end());
  BlendOptions full = qo.blend;
  full.strategy = Strategy::kFullPrefill;
  ASSIGN_OR_RETURN(BlendResult t, BlendPrompt(b, p, full));
  o.ref = t.logits;
  o.truth = std::make_unique<BlendResult>(std::move(t));
  BlendOptions reuse = qo.blend;
  reuse.strategy = Strategy::kFullReuse;
  ASSIGN_OR_RETURN(BlendResult c, BlendPrompt(b, p, reuse));
  o.reuse = std::make_unique<BlendResult>(std::move(c));
  BlendOptions sched = qo.blend;
  sched.ratio = 0.1;
  const std::vector<CheckLayer> schedule = MakeSchedule(sched, L);
  const int exact = schedule.empty() ? 0 : schedule[0].layer + 1;
  ASSIGN_OR_RETURN(o.swap, SwapModel::Create(m, o.lay, o.truth->cache, o.reuse->cache, exact, o.ref));
  if (want.count("effect")) RETURN_IF_ERROR(Effects(schedule, L, &o));
  if (want.count("greedy")) {
    double rmax = 0;
    for (double r : qo.ratios) rmax = std::max(rmax, r);
    const double first = schedule.empty() ? rmax : schedule[0].ratio / 0.1 * rmax;
    RETURN_IF_ERROR(Greedy(std::llround(first * o.lay.selectable()), L, &o));
  }
  return o;
}

// Allocate: the per-prompt choice of a ratio index minimizing the mean KL
// with mean r <= budget (Lagrangian over the grid); returns (kl, r) means.
std::pair<double, double> Allocate(const std::vector<std::vector<Agreement>>& kl,
                                   const std::vector<double>& ratios, double budget) {
  const size_t P = kl.empty() ? 0 : kl[0].size();
  auto choose = [&](double lambda, double* mkl, double* mr) {
    *mkl = *mr = 0;
    for (size_t p = 0; p < P; ++p) {
      size_t best = 0;
      for (size_t i = 1; i < ratios.size(); ++i) {
        if (kl[i][p].kl + lambda * ratios[i] < kl[best][p].kl + lambda * ratios[best]) best = i;
      }
      *mkl += kl[best][p].kl / P, *mr += ratios[best] / P;
    }
  };
  double lo = 0, hi = 10, mkl = 0, mr = 0;
  for (int it = 0; it < 80; ++it) {
    const double mid = (lo + hi) / 2;
    choose(mid, &mkl, &mr);
    (mr <= budget ? hi : lo) = mid;
  }
  choose(hi, &mkl, &mr);
  return {mkl, mr};
}

void Print(const QualityBenchOptions& o, const std::vector<std::string>& rankers, const Scores& s,
           std::ostream& out) {
  const double P = static_cast<double>(s.reuse_kl.size());
  double reuse = 0, reuse_top1 = 0;
  for (size_t p = 0; p < s.reuse_kl.size(); ++p) reuse += s.reuse_kl[p] / P, reuse_top1 += s.reuse_top1[p] / P;
  out << absl::StrFormat("oracle ranker=full-reuse r=0.00 kl=%.6f x_full_reuse=1.000 top1=%.4f\n",
                         reuse, reuse_top1);
  for (const std::string& name : rankers) {
    if (IsStopRule(name)) continue;
    const auto& by_ratio = s.by_ranker.at(name);
    for (size_t i = 0; i < o.ratios.size(); ++i) {
      double kl = 0, top1 = 0;
      for (const Agreement& a : by_ratio[i]) kl += a.kl / P, top1 += a.top1 / P;
      out << absl::StrFormat("oracle ranker=%s r=%.3f kl=%.6f x_full_reuse=%.3f top1=%.4f\n", name,
                             o.ratios[i], kl, kl / reuse, top1);
    }
  }
  for (const std::string& name : rankers) {
    if (IsStopRule(name)) continue;
    for (double b : o.oracle_budgets) {
      const auto [kl, r] = Allocate(s.by_ranker.at(name), o.ratios, b);
      out << absl::StrFormat("oracle-budget ranker=%s budget=%.3f mean_r=%.4f kl=%.6f x_full_reuse=%.3f\n",
                             name, b, r, kl, kl / reuse);
    }
  }
  for (const auto& [name, v] : s.adaptive) {
    double kl = 0, r = 0;
    for (const auto& [k, x] : v) kl += k / P, r += x / P;
    out << absl::StrFormat("oracle ranker=%s mean_r=%.4f kl=%.6f x_full_reuse=%.3f\n", name, r, kl,
                           kl / reuse);
  }
}

// OnePrompt: every ranker at every ratio (and the adaptive masses) on `p`.
absl::Status OnePrompt(const Blender& b, const PromptData& p, const QualityBenchOptions& o,
                       const std::vector<std::string>& rankers, Scores* s) {
  const model::Model& m = b.model();
  const int L = m.config().n_layers, vocab = m.config().vocab_size;
  const std::set<std::string> want(rankers.begin(), rankers.end());
  ASSIGN_OR_RETURN(Oracle orc, MakeOracle(b, p, o, want));
  const int64_t Q = static_cast<int64_t>(p.query.size());
  const Agreement ra = QueryAgreement(orc.ref.data(), orc.reuse->logits.data(), Q, vocab);
  s->reuse_kl.push_back(ra.kl);
  s->reuse_top1.push_back(ra.top1);
  for (size_t i = 0; i < o.ratios.size(); ++i) {
    BlendOptions bo = o.blend;
    bo.strategy = Strategy::kCacheBlend;
    bo.ratio = o.ratios[i];
    ASSIGN_OR_RETURN(BlendResult br, BlendPrompt(b, p, bo));
    const std::vector<CheckLayer> schedule = MakeSchedule(bo, L);
    for (const std::string& name : rankers) {
      if (IsStopRule(name)) continue;
      auto& slot = s->by_ranker[name];
      slot.resize(o.ratios.size());
      std::vector<float> logits;
      if (name == "blender") {
        logits = br.logits;
      } else {
        Ranker rank = RealRanker(name, m, orc.lay.query_begin);
        if (!rank) rank = MakeRanker(name, orc, L, &br.recomputed);
        ASSIGN_OR_RETURN(logits, ReplayBlend(m, orc.lay, orc.reuse->cache, schedule, rank));
      }
      slot[i].push_back(QueryAgreement(orc.ref.data(), logits.data(), Q, vocab));
    }
  }
  if (o.adaptive) {
    // One line per mass, then per threshold (which overrides the mass).
    std::vector<std::pair<std::string, BlendOptions>> lines;
    for (double mass : o.adaptive_masses) {
      lines.push_back({absl::StrFormat("adaptive/m=%.3f", mass), o.blend});
      lines.back().second.adaptive_mass = mass;
    }
    for (double t : o.adaptive_thresholds) {
      lines.push_back({absl::StrFormat("adaptive/t=%g", t), o.blend});
      lines.back().second.adaptive_threshold = t;
    }
    for (auto& [name, bo] : lines) {
      bo.strategy = Strategy::kCacheBlend;
      bo.ratio = o.adaptive_max;
      ASSIGN_OR_RETURN(BlendResult br, BlendPrompt(b, p, bo));
      s->adaptive[name].push_back(
          {QueryAgreement(orc.ref.data(), br.logits.data(), Q, vocab).kl, br.applied_ratio});
    }
  }
  BlendOptions capped = o.blend;
  capped.ratio = o.adaptive_max;
  const std::vector<CheckLayer> schedule = MakeSchedule(capped, L);
  for (const std::string& name : rankers) {
    if (!IsStopRule(name)) continue;
    const RatioChooser choose = StopRule(name, m, orc.lay.query_begin, orc.lay.selectable(),
                                         capped.adaptive_min, o.adaptive_max);
    double r = 0;
    ASSIGN_OR_RETURN(std::vector<float> logits,
                     ReplayBlend(m, orc.lay, orc.reuse->cache, schedule,
                                 RealRanker("attended-deviation", m, orc.lay.query_begin), choose,
                                 &r));
    s->adaptive[name].push_back({QueryAgreement(orc.ref.data(), logits.data(), Q, vocab).kl, r});
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunOracleBench(const QualityBenchOptions& options, std::ostream& out) {
  RETURN_IF_ERROR(CheckQualityBenchOptions(options));
  QualityBenchOptions o = options;
  for (const std::string& r : o.oracle) {
    if (!kRankers.count(r) && !IsStopRule(r)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quality bench: unknown --oracle ranker '", r,
          "' (blender, replay, future-dev, future-attended, effect, greedy, attended-deviation, "
          "attended-linear, mass@M, abs@T, res@E)"));
    }
  }
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(auto model, LoadQualityModel(o));
  ASSIGN_OR_RETURN(auto blender, Blender::Create({model.get()}));
  std::string what = absl::StrFormat("task=%s seed=%d", o.task, o.seed);
  ASSIGN_OR_RETURN(std::unique_ptr<CorpusPrompts> corpus, LoadQualityCorpus(o));
  if (corpus != nullptr) {
    o.prompts = static_cast<int>(corpus->prompts.size());
    what = "task=musique " + corpus->description;
  }
  Scores s;
  for (int i = 0; i < o.prompts; ++i) {
    ASSIGN_OR_RETURN(PromptData p, MakePrompt(*model, o, i, corpus.get(), nullptr));
    RETURN_IF_ERROR(OnePrompt(*blender, p, o, o.oracle, &s));
  }
  out << absl::StrFormat("# oracle: model=%s %s prompts=%d chunks=%d x %d query<=%d kv=%s selector=%s "
                         "gradual_steps=%d, %.1f s\n",
                         o.model_path, what, o.prompts, o.chunks, o.chunk_tokens_max, o.query_tokens,
                         kernels::DTypeName(o.kv_dtype), SelectorName(o.blend.selector),
                         o.blend.gradual_steps, SecondsSince(t0));
  Print(o, o.oracle, s, out);
  return absl::OkStatus();
}

}  // namespace ragkv::blend
