#include "bench/blend/bench_quality.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "blend/kv_source.h"
#include "model/loader.h"

namespace ragkv::blend {
namespace {

// Sample: temperature + nucleus (top-p) sampling from logits; `banned` ids
// are never drawn.
int32_t Sample(const float* logits, int vocab, float temperature, float top_p,
               const std::vector<int32_t>& banned, std::mt19937_64* rng) {
  std::vector<double> p(vocab);
  double mx = -1e300;
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < vocab; ++i) {
    p[i] = std::exp((logits[i] - mx) / std::max(1e-6f, temperature));
  }
  for (int32_t b : banned) p[b] = 0;
  for (double x : p) sum += x;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return p[a] != p[b] ? p[a] > p[b] : a < b;
  });
  double cum = 0;
  size_t keep = 0;
  while (keep < order.size() && (keep == 0 || cum < top_p * sum)) cum += p[order[keep++]];
  std::uniform_real_distribution<double> u(0.0, cum);
  double x = u(*rng), acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[order[i]];
    if (x <= acc) return order[i];
  }
  return order[keep - 1];
}

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

int Argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

struct PromptData {
  std::vector<int32_t> prefix;
  std::vector<std::vector<int32_t>> chunks;
  std::vector<int32_t> query;
  std::vector<int32_t> continuation;
  std::vector<std::unique_ptr<ChunkKV>> kv;  // [0] prefix, then chunks
};

// Generates `n` tokens after `context` by sampling (full prefill, then decode).
absl::StatusOr<std::vector<int32_t>> Generate(const model::Model& m,
                                              const std::vector<int32_t>& context, int n,
                                              const QualityBenchOptions& o,
                                              const std::vector<int32_t>& banned,
                                              std::mt19937_64* rng) {
  const int vocab = m.config().vocab_size;
  ASSIGN_OR_RETURN(model::KVCache cache,
                   m.NewCache(static_cast<int64_t>(context.size()) + n));
  model::Workspace ws;
  std::vector<float> logits(vocab);
  RETURN_IF_ERROR(m.Prefill(context, &cache, &ws, model::LogitsMode::kLast, logits.data()));
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = Sample(logits.data(), vocab, o.temperature, o.top_p, banned, rng);
    out.push_back(t);
    if (i + 1 < n) RETURN_IF_ERROR(m.DecodeStep(t, &cache, &ws, logits.data()));
  }
  return out;
}

absl::StatusOr<PromptData> MakePrompt(const model::Model& m, const QualityBenchOptions& o,
                                      int index) {
  std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) * 7919 + 1);
  const int32_t bos = 1, eos = 2;
  const std::vector<int32_t> banned = {bos, eos};
  PromptData p;
  p.prefix = {bos};
  std::uniform_int_distribution<int> len(o.chunk_tokens_min, o.chunk_tokens_max);
  std::vector<int32_t> context = p.prefix;
  for (int c = 0; c < o.chunks; ++c) {
    const int T = len(rng);
    ASSIGN_OR_RETURN(auto toks, Generate(m, {bos}, T, o, banned, &rng));
    context.insert(context.end(), toks.begin(), toks.end());
    p.chunks.push_back(std::move(toks));
  }
  const int64_t total = static_cast<int64_t>(context.size()) + o.query_tokens +
                        o.continuation_tokens;
  if (total > m.config().max_seq_len) {
    return absl::OutOfRangeError(absl::StrCat("quality bench: prompt of ", total,
                                              " tokens exceeds the context of ",
                                              m.config().max_seq_len));
  }
  ASSIGN_OR_RETURN(auto tail, Generate(m, context, o.query_tokens + o.continuation_tokens, o,
                                       banned, &rng));
  p.query.assign(tail.begin(), tail.begin() + o.query_tokens);
  p.continuation.assign(tail.begin() + o.query_tokens, tail.end());
  ASSIGN_OR_RETURN(ChunkKV pk, PrecomputeChunk(m, p.prefix));
  p.kv.push_back(std::make_unique<ChunkKV>(std::move(pk)));
  for (const auto& c : p.chunks) {
    ASSIGN_OR_RETURN(ChunkKV ck, o.condition_on_prefix
                                     ? PrecomputeChunkAfter(m, p.prefix, c, m.config().kv_dtype)
                                     : PrecomputeChunk(m, c));
    p.kv.push_back(std::make_unique<ChunkKV>(std::move(ck)));
  }
  return p;
}

struct Strat {
  std::string name, family;
  double ratio = 0;
  BlendOptions options;
};

// Outcome of one strategy on one prompt.
struct Eval {
  std::vector<float> logits;  // [query_tokens, vocab]
  double nll = 0;             // mean over the continuation
  double recomputed = 0;
};

absl::StatusOr<Eval> Evaluate(const Blender& blender, const PromptData& p, BlendOptions o) {
  const model::Model& m = blender.model();
  const int vocab = m.config().vocab_size;
  std::vector<std::unique_ptr<InMemoryKvSource>> sources;
  for (const auto& kv : p.kv) sources.push_back(std::make_unique<InMemoryKvSource>(kv.get()));
  std::vector<BlendSegment> segs;
  segs.push_back({SegmentKind::kPrefix, p.prefix, sources[0].get()});
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    segs.push_back({SegmentKind::kChunk, p.chunks[c], sources[c + 1].get()});
  }
  segs.push_back({SegmentKind::kQuery, p.query, nullptr});
  o.logits = QueryLogits::kAll;
  o.extra_capacity_tokens = static_cast<int64_t>(p.continuation.size());
  ASSIGN_OR_RETURN(BlendResult r, blender.Blend(segs, o));
  Eval e;
  e.logits = std::move(r.logits);
  double rows = 0;
  for (const auto& rc : r.recomputed) rows += static_cast<double>(rc.size());
  e.recomputed = rows / (static_cast<double>(r.recomputed.size()) * r.total_tokens);
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

absl::Status WritePlot(const QualityBenchOptions& o, const std::vector<StrategyQuality>& rows) {
  const std::string dat = o.png_path + ".dat";
  {
    std::ofstream f(dat);
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", dat));
    for (const char* fam : {"gradual", "single", "bottom-right"}) {
      f << "# " << fam << "\n";
      for (const auto& r : rows) {
        if (r.family == fam) f << r.ratio * 100 << " " << r.kl << " " << r.top1 << "\n";
      }
      f << "\n\n";
    }
  }
  double reuse_kl = 0, reuse_top1 = 0;
  for (const auto& r : rows) {
    if (r.family == "full-reuse") reuse_kl = r.kl, reuse_top1 = r.top1;
  }
  const std::string gp = o.png_path + ".gp";
  {
    std::ofstream f(gp);
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", gp));
    f << "set terminal pngcairo size 1200,480 font ',10'\n"
      << "set output '" << o.png_path << "'\n"
      << "set multiplot layout 1,2 title 'Blend quality vs full prefill (" << o.prompts
      << " prompts, " << o.chunks << " chunks x " << o.chunk_tokens_min << "-"
      << o.chunk_tokens_max << " tokens, query " << o.query_tokens << ")'\n"
      << "set xlabel 'recompute ratio r (%)'\nset grid\nset key top right\n"
      << "set ylabel 'mean KL(full || strategy) at query positions (nats)'\nset logscale y\n"
      << "plot '" << dat << "' index 0 using 1:2 with linespoints lw 2 title 'gradual filtering', "
      << "'' index 1 using 1:2 with linespoints lw 2 title 'single check layer', "
      << "'' index 2 using 1:2 with linespoints lw 2 title 'single check + bottom-right mask', "
      << reuse_kl << " with lines dt 2 lw 2 title 'full reuse (r=0)'\n"
      << "unset logscale y\nset ylabel 'top-1 agreement with full prefill'\nset key bottom right\n"
      << "plot '" << dat << "' index 0 using 1:3 with linespoints lw 2 title 'gradual filtering', "
      << "'' index 1 using 1:3 with linespoints lw 2 title 'single check layer', "
      << "'' index 2 using 1:3 with linespoints lw 2 title 'single check + bottom-right mask', "
      << reuse_top1 << " with lines dt 2 lw 2 title 'full reuse (r=0)'\n"
      << "unset multiplot\n";
  }
  const std::string cmd = absl::StrCat("gnuplot '", gp, "' 2>&1");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed: ", cmd));
  }
  std::remove(dat.c_str());
  std::remove(gp.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<StrategyQuality>> RunQualityBench(const QualityBenchOptions& o,
                                                             std::ostream& out) {
  if (o.prompts <= 0 || o.chunks <= 0 || o.chunk_tokens_min <= 0 ||
      o.chunk_tokens_max < o.chunk_tokens_min || o.query_tokens <= 0 ||
      o.continuation_tokens <= 0) {
    return absl::InvalidArgumentError("quality bench: counts must be positive, min <= max");
  }
  const auto t0 = std::chrono::steady_clock::now();
  model::LoadOptions lo;
  lo.max_seq_len = o.max_seq_len;
  lo.kv_dtype = o.kv_dtype;
  ASSIGN_OR_RETURN(auto model, model::LoadModel(o.model_path, lo));
  ASSIGN_OR_RETURN(auto blender, Blender::Create({model.get()}));
  const int vocab = model->config().vocab_size;

  std::vector<Strat> strats;
  {
    Strat s{"full-reuse", "full-reuse", 0, o.blend};
    s.options.strategy = Strategy::kFullReuse;
    strats.push_back(s);
    Strat pr{"prefix-reuse", "prefix-reuse", 0, o.blend};
    pr.options.strategy = Strategy::kPrefixReuse;
    strats.push_back(pr);
  }
  for (const char* fam : {"gradual", "single", "bottom-right"}) {
    for (double r : o.ratios) {
      Strat s{absl::StrFormat("blend-%s r=%.2f", fam, r), fam, r, o.blend};
      s.options.strategy = Strategy::kCacheBlend;
      s.options.ratio = r;
      s.options.filtering = std::string(fam) == "gradual" ? Filtering::kGradual
                                                          : Filtering::kSingleCheck;
      s.options.causal = std::string(fam) == "bottom-right" ? kernels::CausalMode::kBottomRight
                                                            : kernels::CausalMode::kExact;
      strats.push_back(s);
    }
  }
  BlendOptions full = o.blend;
  full.strategy = Strategy::kFullPrefill;

  std::vector<double> kl(strats.size()), top1(strats.size()), dnll(strats.size()),
      frac(strats.size());
  int64_t positions = 0;
  std::vector<double> lf, ls;
  for (int i = 0; i < o.prompts; ++i) {
    ASSIGN_OR_RETURN(PromptData p, MakePrompt(*model, o, i));
    ASSIGN_OR_RETURN(Eval ref, Evaluate(*blender, p, full));
    const int Q = o.query_tokens;
    for (size_t s = 0; s < strats.size(); ++s) {
      ASSIGN_OR_RETURN(Eval e, Evaluate(*blender, p, strats[s].options));
      for (int q = 0; q < Q; ++q) {
        const float* rf = ref.logits.data() + q * vocab;
        const float* rs = e.logits.data() + q * vocab;
        LogSoftmax(rf, vocab, &lf);
        LogSoftmax(rs, vocab, &ls);
        double d = 0;
        for (int v = 0; v < vocab; ++v) d += std::exp(lf[v]) * (lf[v] - ls[v]);
        kl[s] += d;
        top1[s] += Argmax(rf, vocab) == Argmax(rs, vocab) ? 1 : 0;
      }
      dnll[s] += e.nll - ref.nll;
      frac[s] += e.recomputed;
    }
    positions += Q;
  }
  std::vector<StrategyQuality> rows;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << absl::StrFormat(
      "# quality: model=%s prompts=%d seed=%d chunks=%d x %d-%d tokens, query=%d, "
      "continuation=%d, kv=%s, chunks precomputed %s, %.1f s\n",
      o.model_path, o.prompts, o.seed, o.chunks, o.chunk_tokens_min, o.chunk_tokens_max,
      o.query_tokens, o.continuation_tokens, kernels::DTypeName(o.kv_dtype),
      o.condition_on_prefix ? "after the prefix" : "alone", secs);
  for (size_t s = 0; s < strats.size(); ++s) {
    StrategyQuality q;
    q.name = strats[s].name;
    q.family = strats[s].family;
    q.ratio = strats[s].ratio;
    q.kl = kl[s] / static_cast<double>(positions);
    q.top1 = top1[s] / static_cast<double>(positions);
    q.dnll = dnll[s] / o.prompts;
    q.recomputed_fraction = frac[s] / o.prompts;
    out << absl::StrFormat("%s: kl=%.6f top1=%.4f dnll=%+.5f recomputed=%.3f\n", q.name, q.kl,
                           q.top1, q.dnll, q.recomputed_fraction);
    rows.push_back(q);
  }
  if (!o.csv_path.empty()) {
    std::ofstream f(o.csv_path);
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", o.csv_path));
    f << "strategy,family,ratio,kl,top1,dnll,recomputed_fraction\n";
    for (const auto& q : rows) {
      f << absl::StrFormat("%s,%s,%.2f,%.8f,%.6f,%.6f,%.4f\n", q.name, q.family, q.ratio, q.kl,
                           q.top1, q.dnll, q.recomputed_fraction);
    }
  }
  if (!o.png_path.empty()) RETURN_IF_ERROR(WritePlot(o, rows));
  return rows;
}

}  // namespace ragkv::blend
