#include "bench/blend/bench_quality.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "bench/blend/bootstrap.h"
#include "bench/blend/bench_quality_corpus.h"
#include "bench/blend/quality_prompts.h"
#include "blend/xchunk_task.h"
#include "blend/kv_source.h"
#include "blend/quality_gate.h"
#include "blend/store_source.h"
#include "kvstore/kv_chunk.h"
#include "model/generate.h"
#include "model/tokenizer.h"
#include "model/sampler.h"

namespace ragkv::blend {
namespace {

// LogSoftmax of one row, in double.
void LogSoftmax(const float* logits, int vocab, std::vector<double>* out) {
  out->resize(vocab);
  double mx = -1e300;
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double s = 0;
  for (int i = 0; i < vocab; ++i) s += std::exp(logits[i] - mx);
  const double lse = mx + std::log(s);
  for (int i = 0; i < vocab; ++i) (*out)[i] = logits[i] - lse;
}

struct Strat {
  std::string name, family;
  double ratio = 0;
  BlendOptions options;
  kvstore::Codec codec = kvstore::Codec::kRaw;  // the records the blend reads
  int neighbours = 0;  // > 0: the neighbour-aware records of this k
  int baseline = -1;  // codec / neighbour rows: the same strategy on plain raw records
};

// Outcome of one strategy on one prompt.
struct Eval {
  std::vector<float> logits;  // [query_tokens, vocab]
  double nll = 0;             // mean over the continuation
  double recomputed = 0;
  double applied_ratio = 0;
};

absl::StatusOr<Eval> Evaluate(const Blender& blender, const PromptData& p, BlendOptions o,
                              kvstore::Codec codec = kvstore::Codec::kRaw, int neighbours = 0) {
  const model::Model& m = blender.model();
  const int vocab = m.config().vocab_size;
  const auto& kvs = neighbours > 0                  ? p.nbr.at(neighbours)
                    : codec == kvstore::Codec::kRaw ? p.kv
                                                    : p.coded.at(static_cast<int>(codec));
  ASSIGN_OR_RETURN(BlendResult r,
                   BlendPrompt(blender, p, kvs, std::move(o),
                               static_cast<int64_t>(p.continuation.size())));
  Eval e;
  e.logits = std::move(r.logits);
  double rows = 0;
  for (const auto& rc : r.recomputed) rows += static_cast<double>(rc.size());
  e.recomputed = rows / (static_cast<double>(r.recomputed.size()) * r.total_tokens);
  e.applied_ratio = r.applied_ratio;
  // Teacher-forced continuation on top of the fused cache.
  const size_t C = p.continuation.size();
  std::vector<float> cont_logits(C * vocab);
  model::Workspace ws;
  RETURN_IF_ERROR(m.Prefill(p.continuation, &r.cache, &ws, model::LogitsMode::kAll,
                            cont_logits.data()));
  std::vector<double> ls;
  double nll = 0;
  for (size_t j = 0; j < C; ++j) {
    const float* row = j == 0 ? e.logits.data() + (p.query.size() - 1) * vocab
                              : cont_logits.data() + (j - 1) * vocab;
    LogSoftmax(row, vocab, &ls);
    nll -= ls[p.continuation[j]];
  }
  e.nll = nll / static_cast<double>(C);
  return e;
}

Strat Blend(const QualityBenchOptions& o, const std::string& name, const std::string& family,
            double r) {
  Strat b{name, family, r, o.blend};
  b.options.strategy = Strategy::kCacheBlend;
  b.options.ratio = r;
  b.options.filtering = family == "single" || family == "bottom-right" ? Filtering::kSingleCheck
                                                                      : Filtering::kGradual;
  b.options.causal = family == "bottom-right" ? kernels::CausalMode::kBottomRight
                                              : kernels::CausalMode::kExact;
  return b;
}

// Selector and adaptive strategies (gradual filtering).
absl::Status AddVariants(const QualityBenchOptions& o, std::vector<Strat>* strats) {
  for (const std::string& name : o.selectors) {
    Selector sel;
    if (!ParseSelector(name, &sel)) {
      return absl::InvalidArgumentError(absl::StrCat("quality bench: unknown selector '", name,
                                                     "' (deviation, chunk-head, "
                                                     "query-attention, deviation+attention, attended-deviation)"));
    }
    for (double r : o.ratios) {
      Strat b = Blend(o, absl::StrFormat("select-%s r=%.2f", name, r), "sel-" + name, r);
      b.options.selector = sel;
      strats->push_back(b);
    }
  }
  if (!o.adaptive) return absl::OkStatus();
  for (double t : o.adaptive_thresholds) {
    Strat b = Blend(o, absl::StrFormat("adaptive-gradual threshold=%g", t), "adaptive-threshold",
                    o.adaptive_max);
    b.options.adaptive_threshold = t;
    strats->push_back(b);
  }
  for (double mass : o.adaptive_masses) {
    Strat b = Blend(o, absl::StrFormat("adaptive-gradual mass=%.2f", mass), "adaptive",
                    o.adaptive_max);
    b.options.adaptive_mass = mass;
    strats->push_back(b);
    if (o.blend.selector == Selector::kDeviation) continue;
    // Also by the deviation alone (CacheBlend's own score), for comparison.
    b.name = absl::StrFormat("adaptive-gradual-deviation mass=%.2f", mass);
    b.family = "adaptive-deviation";
    b.options.selector = Selector::kDeviation;
    strats->push_back(b);
  }
  return absl::OkStatus();
}

std::vector<Strat> MakeStrategies(const QualityBenchOptions& o) {
  std::vector<Strat> strats;
  Strat s{"full-reuse", "full-reuse", 0, o.blend};
  s.options.strategy = Strategy::kFullReuse;
  strats.push_back(s);
  Strat pr{"prefix-reuse", "prefix-reuse", 0, o.blend};
  pr.options.strategy = Strategy::kPrefixReuse;
  strats.push_back(pr);
  for (const char* fam : {"gradual", "single", "bottom-right"}) {
    for (double r : o.ratios) {
      strats.push_back(Blend(o, absl::StrFormat("blend-%s r=%.2f", fam, r), fam, r));
    }
  }
  return strats;
}

// Sums of one strategy over the prompts.
struct Tally {
  double kl = 0, top1 = 0, dnll = 0, frac = 0, correct = 0, applied = 0;
  double kl_base = 0, top1_base = 0;  // codec rows: vs the raw records' strategy
  std::vector<double> kl_prompt;      // KL vs full prefill summed over each prompt's positions
};

// Accumulate: one strategy's outcome on one prompt against full prefill's.
void Accumulate(const Eval& ref, const Eval& e, const PromptData& p, int vocab, Tally* t) {
  const int Q = static_cast<int>(p.query.size());
  const Agreement a = QueryAgreement(ref.logits.data(), e.logits.data(), Q, vocab);
  t->kl += a.kl * Q;
  t->kl_prompt.push_back(a.kl * Q);
  t->top1 += a.top1 * Q;
  t->dnll += e.nll - ref.nll;
  t->frac += e.recomputed;
  t->applied += e.applied_ratio;
  if (p.answer >= 0) t->correct += model::Argmax(e.logits.data() + (Q - 1) * vocab, vocab) == p.answer;
}

// AddCodecs: full reuse and gradual CacheBlend at every ratio on the records
// of each codec of o.kv_codecs, each tied to its raw counterpart.
absl::Status AddCodecs(const QualityBenchOptions& o, std::vector<Strat>* strats) {
  const size_t raw_count = strats->size();
  for (const std::string& name : o.kv_codecs) {
    ASSIGN_OR_RETURN(kvstore::Codec codec, kvstore::ParseCodec(name));
    if (codec == kvstore::Codec::kRaw) continue;
    for (size_t i = 0; i < raw_count; ++i) {
      const Strat& base = (*strats)[i];
      if (base.family != "full-reuse" && base.family != "gradual") continue;
      Strat c = base;
      c.name = absl::StrCat(name, " ", base.name);
      c.family = absl::StrCat("codec-", name, "-", base.family);
      c.codec = codec;
      c.baseline = static_cast<int>(i);
      strats->push_back(c);
    }
  }
  return absl::OkStatus();
}

// AddNeighbours: full reuse and gradual CacheBlend at every ratio on the
// neighbour-aware records of each k, each tied to its plain counterpart.
absl::Status AddNeighbours(const QualityBenchOptions& o, std::vector<Strat>* strats) {
  if (!o.neighbours.empty() && o.task != "musique") {
    return absl::InvalidArgumentError("quality bench: --neighbours needs --task musique");
  }
  const size_t plain_count = strats->size();
  for (int k : o.neighbours) {
    if (k < 1) return absl::InvalidArgumentError("quality bench: --neighbours values must be >= 1");
    for (size_t i = 0; i < plain_count; ++i) {
      const Strat& base = (*strats)[i];
      if (base.family != "full-reuse" && base.family != "gradual") continue;
      if (base.codec != kvstore::Codec::kRaw) continue;
      Strat c = base;
      c.name = absl::StrCat("nbr", k, " ", base.name);
      c.family = absl::StrCat("nbr", k, "-", base.family);
      c.neighbours = k;
      c.baseline = static_cast<int>(i);
      strats->push_back(c);
    }
  }
  return absl::OkStatus();
}

// Coded: every chunk of `p` through each codec the strategies read; adds
// the records' bytes and tokens per codec (raw included) to *bytes.
absl::Status Coded(const std::vector<Strat>& strats, PromptData* p,
                   std::map<int, std::pair<double, double>>* bytes) {
  std::set<int> codecs = {static_cast<int>(kvstore::Codec::kRaw)};
  for (const Strat& s : strats) codecs.insert(static_cast<int>(s.codec));
  if (codecs.size() == 1) return absl::OkStatus();
  for (int c : codecs) {
    const auto codec = static_cast<kvstore::Codec>(c);
    for (const auto& kv : p->kv) {
      uint64_t n = 0;
      if (codec == kvstore::Codec::kRaw) {  // the records' size only: raw reads back as is
        RETURN_IF_ERROR(ThroughCodec(*kv, codec, &n).status());
      } else {
        ASSIGN_OR_RETURN(ChunkKV coded, ThroughCodec(*kv, codec, &n));
        p->coded[c].push_back(std::make_unique<ChunkKV>(std::move(coded)));
      }
      (*bytes)[c].first += static_cast<double>(n);
      (*bytes)[c].second += static_cast<double>(kv->tokens.size());
    }
  }
  return absl::OkStatus();
}

// AccuracyName: the strategy names of the accuracy lines (the set).
std::string AccuracyName(const std::string& family) {
  if (family == "gradual" || family == "matched") return "cacheblend-gradual";
  if (family == "matched-deviation") return "cacheblend-gradual-deviation";
  if (family.rfind("sel-", 0) == 0) return "cacheblend-gradual-" + family.substr(4);
  if (family == "single") return "cacheblend-single";
  return family;
}

absl::Status CheckOptions(const QualityBenchOptions& o) {
  if (o.prompts <= 0 || o.chunks <= 0 || o.chunk_tokens_min <= 0 ||
      o.chunk_tokens_max < o.chunk_tokens_min || o.query_tokens <= 0 ||
      o.continuation_tokens <= 0) {
    return absl::InvalidArgumentError("quality bench: counts must be positive, min <= max");
  }
  if (o.task != "story" && o.task != "xchunk" && o.task != "musique") {
    return absl::InvalidArgumentError(
        absl::StrCat("quality bench: unknown task '", o.task, "' (story, xchunk or musique)"));
  }
  if (o.task == "musique" && o.corpus.empty()) {
    return absl::InvalidArgumentError("quality bench: --task musique needs --corpus");
  }
  return absl::OkStatus();
}

void PrintHeader(const QualityBenchOptions& o, double secs, const CorpusPrompts* corpus,
                 std::ostream& out) {
  if (o.task == "musique") {
    out << absl::StrFormat(
        "# quality: task=musique model=%s %s; query<=%d, continuation=%d (seed %d), kv=%s, "
        "selector=%s, %.1f s\n",
        o.model_path, corpus->description, o.query_tokens, o.continuation_tokens, o.seed,
        kernels::DTypeName(o.kv_dtype), SelectorName(o.blend.selector), secs);
    return;
  }
  if (o.task == "xchunk") {
    out << absl::StrFormat(
        "# quality: task=xchunk model=%s prompts=%d seed=%d (%s) pairs=%d chunks=%d, kv=%s, "
        "selector=%s, %.1f s\n",
        o.model_path, o.prompts, o.seed, XchunkSeedIsDev(o.seed) ? "dev" : "test", o.pairs,
        o.chunks, kernels::DTypeName(o.kv_dtype),
        SelectorName(o.blend.selector), secs);
    return;
  }
  out << absl::StrFormat(
      "# quality: model=%s prompts=%d seed=%d chunks=%d x %d-%d tokens, query=%d, "
      "continuation=%d, kv=%s, chunks precomputed %s, selector=%s, %.1f s\n",
      o.model_path, o.prompts, o.seed, o.chunks, o.chunk_tokens_min, o.chunk_tokens_max,
      o.query_tokens, o.continuation_tokens, kernels::DTypeName(o.kv_dtype),
      o.first_position        ? "alone, the first after the prefix"
      : o.condition_on_prefix ? "after the prefix"
                              : "alone",
      SelectorName(o.blend.selector), secs);
}

// Pass: every strategy of `strats` (and full prefill) over the same prompts.
struct Pass {
  std::vector<Tally> tally;
  Tally full;
  int64_t positions = 0;
  std::map<int, std::pair<double, double>> codec_bytes;  // codec -> (bytes, tokens)
  std::map<int, NeighbourCost> cost;  // k -> the records' cost (0: plain; musique only)
};

absl::StatusOr<Pass> RunPass(const Blender& blender, const QualityBenchOptions& o,
                             const std::vector<Strat>& strats, const CorpusPrompts* corpus) {
  const model::Model& m = blender.model();
  const int vocab = m.config().vocab_size;
  BlendOptions full = o.blend;
  full.strategy = Strategy::kFullPrefill;
  Pass pass;
  pass.tally.resize(strats.size());
  for (int i = 0; i < o.prompts; ++i) {
    ASSIGN_OR_RETURN(PromptData p, MakePrompt(m, o, i, corpus, &pass.cost));
    RETURN_IF_ERROR(Coded(strats, &p, &pass.codec_bytes));
    ASSIGN_OR_RETURN(Eval ref, Evaluate(blender, p, full));
    Accumulate(ref, ref, p, vocab, &pass.full);
    std::vector<Eval> evals;
    for (size_t s = 0; s < strats.size(); ++s) {
      ASSIGN_OR_RETURN(Eval e, Evaluate(blender, p, strats[s].options, strats[s].codec,
                                        strats[s].neighbours));
      Accumulate(ref, e, p, vocab, &pass.tally[s]);
      if (strats[s].baseline >= 0) {
        const int Q = static_cast<int>(p.query.size());
        const Agreement a = QueryAgreement(evals[strats[s].baseline].logits.data(),
                                           e.logits.data(), Q, vocab);
        pass.tally[s].kl_base += a.kl * Q;
        pass.tally[s].top1_base += a.top1 * Q;
      }
      evals.push_back(std::move(e));
    }
    pass.positions += static_cast<int64_t>(p.query.size());
  }
  return pass;
}

StrategyQuality Summarize(const Strat& st, const Tally& t, const QualityBenchOptions& o,
                          const Pass& pass) {
  const int64_t positions = pass.positions;
  StrategyQuality q;
  q.name = st.name;
  q.family = st.family;
  q.ratio = st.ratio;
  q.kl = t.kl / static_cast<double>(positions);
  q.top1 = t.top1 / static_cast<double>(positions);
  q.dnll = t.dnll / o.prompts;
  q.recomputed_fraction = t.frac / o.prompts;
  q.accuracy = o.task == "xchunk" ? t.correct / o.prompts : -1;
  q.mean_r = t.applied / o.prompts;
  q.codec = kvstore::CodecName(st.codec);
  if (auto it = pass.codec_bytes.find(static_cast<int>(st.codec)); it != pass.codec_bytes.end()) {
    q.bytes_per_token = it->second.first / it->second.second;
  }
  if (st.baseline >= 0) {
    q.kl_vs_raw = t.kl_base / static_cast<double>(positions);
    q.top1_vs_raw = t.top1_base / static_cast<double>(positions);
    // KL vs full prefill over the raw records' (same strategy), per prompt
    // paired: the ratio and its 95% bootstrap interval.
    const RatioInterval x = BootstrapRatio(t.kl_prompt, pass.tally[st.baseline].kl_prompt);
    q.kl_x_raw = x.ratio, q.kl_x_raw_lo = x.lo, q.kl_x_raw_hi = x.hi;
  }
  return q;
}

void PrintCodecRow(const StrategyQuality& q, std::ostream& out) {
  out << absl::StrFormat("codec codec=%s strategy=%s r=%.2f bytes_per_token=%.1f", q.codec,
                         q.family.substr(std::string("codec-").size() + q.codec.size() + 1), q.ratio,
                         q.bytes_per_token);
  if (q.accuracy >= 0) out << absl::StrFormat(" acc=%.4f dacc=%+.4f", q.accuracy, q.dacc_vs_raw);
  out << absl::StrFormat(
      " kl=%.6f top1=%.4f kl_vs_raw=%.6f top1_vs_raw=%.4f kl_x_raw=%.3f ci95=[%.3f,%.3f]\n", q.kl,
      q.top1, q.kl_vs_raw, q.top1_vs_raw, q.kl_x_raw, q.kl_x_raw_lo, q.kl_x_raw_hi);
}

void PrintRow(const StrategyQuality& q, std::ostream& out) {
  if (q.family.rfind("codec-", 0) == 0) return PrintCodecRow(q, out);
  if (q.family.rfind("nbr", 0) == 0) {
    const size_t dash = q.family.find('-');
    out << absl::StrFormat(
        "neighbours k=%s strategy=%s r=%.2f kl=%.6f top1=%.4f kl_x_plain=%.3f ci95=[%.3f,%.3f] "
        "top1_vs_plain=%.4f\n",
        q.family.substr(3, dash - 3), q.family.substr(dash + 1), q.ratio, q.kl, q.top1,
        q.kl_x_raw, q.kl_x_raw_lo, q.kl_x_raw_hi, q.top1_vs_raw);
    return;
  }
  const bool adaptive = q.family.rfind("adaptive", 0) == 0 || q.family.rfind("matched", 0) == 0;
  const std::string mean_r = adaptive ? absl::StrFormat(" mean_r=%.4f", q.mean_r) : "";
  if (q.accuracy >= 0) {
    out << absl::StrFormat("accuracy strategy=%s r=%.2f acc=%.4f kl=%.6f%s top1=%.4f\n",
                           AccuracyName(q.family), adaptive ? q.mean_r : q.ratio, q.accuracy,
                           q.kl, mean_r, q.top1);
  } else {
    out << absl::StrFormat("%s: kl=%.6f%s top1=%.4f dnll=%+.5f recomputed=%.3f\n", q.name, q.kl,
                           mean_r, q.top1, q.dnll, q.recomputed_fraction);
  }
}

// MatchedStrategies: fixed r (gradual) at each adaptive row's mean r.
std::vector<Strat> MatchedStrategies(const QualityBenchOptions& o,
                                     const std::vector<StrategyQuality>& rows) {
  std::vector<Strat> out;
  for (const auto& q : rows) {
    if (q.family.rfind("adaptive", 0) != 0) continue;
    const double r = std::round(q.mean_r * 1e4) / 1e4;
    const bool dev = q.family == "adaptive-deviation";
    Strat b = Blend(o, absl::StrFormat("blend-gradual r=%.4f (matched to %s)", r, q.name),
                    dev ? "matched-deviation" : "matched", r);
    if (dev) b.options.selector = Selector::kDeviation;
    out.push_back(b);
  }
  return out;
}

}  // namespace

void PrintCosts(const Pass& pass, std::ostream& out) {
  auto plain = pass.cost.find(0);
  if (plain == pass.cost.end() || plain->second.records == 0) return;
  const NeighbourCost& p0 = plain->second;
  for (const auto& [k, c] : pass.cost) {
    if (k == 0 || c.records == 0) continue;
    out << absl::StrFormat(
        "neighbours k=%d precompute_s=%.3f x_plain=%.2f context_tokens=%.1f bytes_per_record=%.0f "
        "plain_precompute_s=%.3f plain_bytes_per_record=%.0f\n",
        k, c.seconds, c.seconds / p0.seconds, c.context_tokens / c.records, c.bytes / c.records,
        p0.seconds, p0.bytes / p0.records);
  }
}

absl::Status CheckQualityBenchOptions(const QualityBenchOptions& options) {
  return CheckOptions(options);
}

absl::StatusOr<std::vector<StrategyQuality>> RunQualityBench(const QualityBenchOptions& options,
                                                             std::ostream& out) {
  RETURN_IF_ERROR(CheckOptions(options));
  if (!options.oracle.empty()) {
    return absl::InvalidArgumentError("quality bench: --oracle runs RunOracleBench (bench_oracle.h)");
  }
  QualityBenchOptions o = options;
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(auto model, LoadQualityModel(o));
  ASSIGN_OR_RETURN(auto blender, Blender::Create({model.get()}));
  if (o.task == "xchunk" && model->config().vocab_size != kXchunkVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quality bench: --task xchunk needs the xchunk checkpoint (vocabulary of ", kXchunkVocab,
        " tokens; docs/xchunk.md); ", o.model_path, " has ", model->config().vocab_size));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CorpusPrompts> corpus, LoadQualityCorpus(o));
  if (corpus != nullptr) {
    o.prompts = static_cast<int>(corpus->prompts.size());
  }
  std::vector<Strat> strats = MakeStrategies(o);
  RETURN_IF_ERROR(AddVariants(o, &strats));
  RETURN_IF_ERROR(AddCodecs(o, &strats));
  RETURN_IF_ERROR(AddNeighbours(o, &strats));
  ASSIGN_OR_RETURN(Pass pass, RunPass(*blender, o, strats, corpus.get()));
  std::vector<StrategyQuality> rows;
  if (o.task == "xchunk") {
    Strat full{"full-prefill", "full-prefill", 1.0, o.blend};
    rows.push_back(Summarize(full, pass.full, o, pass));
    rows.back().kl = 0, rows.back().top1 = 1, rows.back().dnll = 0, rows.back().mean_r = 1;
  }
  const size_t first = rows.size();
  for (size_t s = 0; s < strats.size(); ++s) {
    rows.push_back(Summarize(strats[s], pass.tally[s], o, pass));
    if (strats[s].baseline >= 0 && rows.back().accuracy >= 0) {
      rows.back().dacc_vs_raw = rows.back().accuracy - rows[first + strats[s].baseline].accuracy;
    }
  }
  const std::vector<Strat> matched = MatchedStrategies(o, rows);
  if (!matched.empty()) {
    ASSIGN_OR_RETURN(Pass mp, RunPass(*blender, o, matched, corpus.get()));
    for (size_t s = 0; s < matched.size(); ++s) {
      rows.push_back(Summarize(matched[s], mp.tally[s], o, mp));
    }
  }
  PrintHeader(o, SecondsSince(t0), corpus.get(), out);
  for (const auto& q : rows) PrintRow(q, out);
  PrintCosts(pass, out);
  if (auto it = pass.codec_bytes.find(0); it != pass.codec_bytes.end()) {
    out << absl::StrFormat("codec codec=raw dtype=%s bytes_per_token=%.1f\n",
                           kernels::DTypeName(o.kv_dtype), it->second.first / it->second.second);
  }
  if (!o.csv_path.empty()) RETURN_IF_ERROR(WriteCsv(o.csv_path, rows));
  if (!o.png_path.empty()) RETURN_IF_ERROR(WritePlot(o, rows));
  return rows;
}

}  // namespace ragkv::blend
