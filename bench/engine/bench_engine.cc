#include "bench/engine/bench_engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "bench/blend/bootstrap.h"
#include "bench/engine/internal/engine_workload.h"
#include "bench/model/synthetic_gguf.h"
#include "bench/services/bench_ttft_grpc.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/blender.h"
#include "blend/kv_source.h"
#include "blend/quality_gate.h"
#include "engine/llamacpp/llama_engine.h"
#include "engine/llamacpp/runtime.h"
#include "kernels/cpu.h"
#include "llama.h"
#include "model/kv_cache.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "retrieval/qa_split.h"

namespace ragkv::bench {
namespace {

namespace lc = engine::llamacpp;
namespace ti = services::ttft_internal;
using engine_internal::BuildTexts;
using engine_internal::EnginePrompt;
using engine_internal::Prepare;
using engine_internal::Texts;
// Strategy: one column of the matrix (ratio and selector for cacheblend
// only; a named selector makes the name "cacheblend/<selector>").
struct Strategy {
  std::string name;
  double ratio = 0;
  std::string selector;  // "": the sidecar's
  int chunk_head_tokens = 0;
  double adaptive_mass = 0;  // > 0: the ratio is the cap of an adaptive choice
  double adaptive_threshold = 0;  // > 0: the same, by the threshold rule
  double adaptive_budget = 0;     // > 0: the same, by the budget rule
  int lookahead_layers = 0;       // the look-ahead's horizon (0: every layer)
};

// Compare: mean KL(ref || got) and top-1 agreement over the rows of two
// [n][vocab] logit blocks (blend::QueryAgreement over the common rows).
void Compare(const std::vector<float>& ref, const std::vector<float>& got, int vocab, double* kl,
             double* top1) {
  const int64_t n = static_cast<int64_t>(std::min(ref.size(), got.size()) / vocab);
  const blend::Agreement a = blend::QueryAgreement(ref.data(), got.data(), n, vocab);
  *kl = a.kl;
  *top1 = a.top1;
}

bool IsAdaptive(const Strategy& s) {
  return s.adaptive_mass > 0 || s.adaptive_threshold > 0 || s.adaptive_budget > 0;
}

// Replay: the options fixed at the ratio an adaptive pass applied.
void Replay(double applied_ratio, v1::BlendOptions* o) {
  o->set_recompute_ratio(static_cast<float>(applied_ratio));
  o->set_adaptive_mass(0);
  o->set_adaptive_threshold(0);
  o->set_adaptive_budget(0);
}

// Request: the chunks and the query's first token (`whole`: every query
// token but the last, as the OpenAI server sends it); llama.cpp prefills
// the rest itself (local_tail).
v1::BlendRequest Request(const EnginePrompt& p, const Strategy& s, bool whole) {
  v1::BlendRequest br;
  for (uint64_t id : p.chunk_ids) br.add_segments()->set_chunk_id(id);
  for (const std::vector<int32_t>& d : p.documents) {
    v1::Segment* seg = br.add_segments();
    seg->mutable_tokens()->mutable_ids()->Assign(d.begin(), d.end());
    seg->set_document(true);
  }
  auto* q = br.add_segments()->mutable_tokens()->mutable_ids();
  whole = whole && p.query >= 2;  // a one-token query: its only token, as "first"
  q->Add(p.tokens.end() - p.query, whole ? p.tokens.end() - 1 : p.tokens.end() - p.query + 1);
  v1::BlendOptions* o = br.mutable_options();
  o->set_add_bos(p.bos);
  o->set_output_dtype(v1::DTYPE_F16);
  if (s.name == "full-reuse") {
    o->set_mode(v1::BLEND_MODE_FULL_REUSE);
  } else {
    o->set_mode(v1::BLEND_MODE_CACHEBLEND);
    o->set_recompute_ratio(static_cast<float>(s.ratio));
    o->set_selector(s.selector);
    o->set_chunk_head_tokens(static_cast<uint32_t>(s.chunk_head_tokens));
    o->set_lookahead_layers(static_cast<uint32_t>(s.lookahead_layers));
    o->set_adaptive_mass(static_cast<float>(s.adaptive_mass));
    o->set_adaptive_threshold(static_cast<float>(s.adaptive_threshold));
    o->set_adaptive_budget(static_cast<float>(s.adaptive_budget));
  }
  return br;
}

// MeasureCachePages: one fused cache of `tokens` rows in fresh memory (the
// first allocation only: a small one is served from already-faulted heap
// later), then zeroed again in the same kept memory (best of 3).
CachePages MeasureCachePages(const model::ModelConfig& c, int64_t tokens) {
  const size_t n = model::KVCacheFloats(c, tokens);
  CachePages p;
  p.mb = static_cast<double>(n * sizeof(float)) / (1 << 20);
  p.fresh_ms = p.kept_ms = 1e30;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    std::vector<float> fresh(n, 0.0f);
    if (i == 0) p.fresh_ms = MsSince(t0);
    t0 = Clock::now();
    fresh.assign(n, 0.0f);
    p.kept_ms = std::min(p.kept_ms, MsSince(t0));
    volatile float sink = fresh[n / 2];
    (void)sink;
  }
  return p;
}

// Runner: the llama.cpp side: context 0 for full prefill and the ragkv
// strategies (one engine per query length), context 1 for the prefix cache.
class Runner {
 public:
  // whole_query: EngineBenchOptions::sidecar_query == "all".
  // config: ragkv's config of the same file (the handover layout of a
  // sliding-window model needs it); not owned.
  Runner(lc::LlamaFile* file, Client* sidecar, const model::ModelConfig* config, std::string fp,
         bool whole_query)
      : file_(file), sidecar_(sidecar), config_(config), fp_(std::move(fp)),
        whole_query_(whole_query) {}

  // ForgetPrefix: context 1 holds nothing (no previous request).
  void ForgetPrefix() {
    llama_memory_seq_rm(llama_get_memory(file_->context(1)), 0, -1, -1);
    held_.clear();
  }

  absl::Status Run(const EnginePrompt& p, const Strategy& s, EngineSample* out,
                   std::vector<float>* logits) {
    out->strategy = s.name;
    out->ratio = s.ratio;
    out->context_tokens = static_cast<int>(p.tokens.size()) - p.query;
    out->query_tokens = p.query;
    if (s.name == "full-prefill" || s.name == "prefix-cache") return Local(p, s, out, logits);
    const v1::BlendRequest req = Request(p, s, whole_query_);
    lc::LlamaCppEngine::Result r;
    if (whole_query_) {  // the served path first (timed cold), llama.cpp decodes the last token
      ASSIGN_OR_RETURN(lc::LlamaCppEngine * served, EngineFor(1));
      const auto t0 = Clock::now();
      ASSIGN_OR_RETURN(r, served->Prefill(req, p.tokens, 0));
      out->ttft_ms = MsSince(t0);
    }
    // Quality: the same request, llama.cpp computing every query row itself.
    // After a served pass, an adaptive request replays the ratio it applied
    // (a budget would otherwise count it twice and choose anew): the same
    // count of the selector's top rows at every check (RunEngineBench keeps
    // the cap <= 0.5 for it), checked by the rows recomputed.
    const bool replay = whole_query_ && IsAdaptive(s) && r.fallback.empty();
    v1::BlendRequest again = req;
    if (replay) Replay(r.applied_ratio, again.mutable_options());
    ASSIGN_OR_RETURN(lc::LlamaCppEngine * e, EngineFor(p.query));
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(lc::LlamaCppEngine::Result q, e->Prefill(again, p.tokens, 0));
    if (replay && q.fallback.empty() && q.recomputed_tokens != r.recomputed_tokens) {
      return absl::InternalError(absl::StrFormat(
          "bench engine: the quality pass of %s recomputed %d rows, the served pass %d", s.name,
          q.recomputed_tokens, r.recomputed_tokens));
    }
    const double quality_ms = MsSince(t0);
    *logits = std::move(q.logits);
    if (!whole_query_) {
      out->ttft_ms = quality_ms;
      r = std::move(q);
    }
    out->blend_ms = r.blend_ms, out->handover_ms = r.handover_ms, out->decode_ms = r.decode_ms;
    out->handed_over = r.handed_over_tokens, out->reused = r.reused_tokens;
    out->recomputed = r.recomputed_tokens, out->prefilled = r.prefilled_tokens;
    out->applied_ratio = r.applied_ratio;
    out->fallback = r.fallback;
    return absl::OkStatus();
  }

 private:
  // Local: llama.cpp alone; the prefix cache keeps what context 1 holds of
  // the previous request's prompt.
  absl::Status Local(const EnginePrompt& p, const Strategy& s, EngineSample* out,
                     std::vector<float>* logits) {
    const bool prefix = s.name == "prefix-cache";
    llama_context* ctx = file_->context(prefix ? 1 : 0);
    size_t keep = 0;
    if (prefix) {
      while (keep < held_.size() && keep < p.tokens.size() && held_[keep] == p.tokens[keep]) ++keep;
      keep = std::min(keep, p.tokens.size() - p.query);
    }
    const auto t0 = Clock::now();
    llama_memory_seq_rm(llama_get_memory(ctx), 0, static_cast<llama_pos>(keep), -1);
    RETURN_IF_ERROR(lc::DecodeTokens(ctx, p.tokens, keep, 0, p.query, logits));
    out->ttft_ms = out->decode_ms = MsSince(t0);
    out->prefilled = static_cast<int>(p.tokens.size() - keep);
    out->handed_over = out->reused = static_cast<int>(keep);
    if (prefix) held_ = p.tokens;
    return absl::OkStatus();
  }
  absl::StatusOr<lc::LlamaCppEngine*> EngineFor(int query) {
    auto& e = engines_[query];
    if (e == nullptr) {
      lc::LlamaCppEngine::Options o;
      o.ctx = file_->context(0);
      o.sidecar = sidecar_;
      o.model_fingerprint = fp_;
      o.config = config_;
      o.deadline = absl::Minutes(5);
      o.local_tail = query;
      ASSIGN_OR_RETURN(e, lc::LlamaCppEngine::Create(o));
    }
    return e.get();
  }

  lc::LlamaFile* file_;
  Client* sidecar_;
  const model::ModelConfig* config_;
  std::string fp_;
  bool whole_query_;
  std::vector<int32_t> held_;  // context 1's sequence 0
  std::map<int, std::unique_ptr<lc::LlamaCppEngine>> engines_;
};

// WarmFirstPositions: every prompt once through the sidecar (full reuse,
// not recorded), so that store-back writes each first chunk's
// first-position record; waits for it.
absl::Status WarmFirstPositions(const std::vector<EnginePrompt>& prompts, Runner* runner,
                                const services::GrpcTtftPath& sidecar, std::ostream& progress) {
  const Strategy reuse{"full-reuse", 0, "", 0};
  for (const EnginePrompt& p : prompts) {
    EngineSample unused;
    std::vector<float> logits;
    RETURN_IF_ERROR(runner->Run(p, reuse, &unused, &logits));
  }
  const auto t0 = Clock::now();
  sidecar.DrainStoreBack();
  progress << absl::StrFormat(
      "bench engine: first-position records: %d prompts sent once, store-back drained in %.1f s\n",
      prompts.size(), SecondsSince(t0));
  return absl::OkStatus();
}

std::vector<Strategy> Strategies(const EngineBenchOptions& o) {
  std::vector<Strategy> s = {{"full-prefill", 0, "", 0}, {"prefix-cache", 0, "", 0},
                             {"full-reuse", 0, "", 0}};
  const std::string head = o.chunk_head_tokens > 0 ? absl::StrCat("+head", o.chunk_head_tokens) : "";
  if (o.selectors.empty()) {
    for (double r : o.ratios) s.push_back({"cacheblend" + head, r, "", o.chunk_head_tokens});
  }
  for (const std::string& sel : o.selectors) {
    for (double r : o.ratios) {
      s.push_back({"cacheblend/" + sel + head, r, sel, o.chunk_head_tokens});
    }
  }
  const std::string sel = o.selectors.size() == 1 ? o.selectors[0] : "";
  for (double m : o.adaptive_masses) {
    s.push_back({absl::StrFormat("cacheblend-adaptive/m=%.3g%s", m, head), o.adaptive_max, sel,
                 o.chunk_head_tokens, m});
  }
  for (double t : o.adaptive_thresholds) {
    s.push_back({absl::StrFormat("cacheblend-adaptive/t=%.3g%s", t, head), o.adaptive_max, sel,
                 o.chunk_head_tokens, 0, t});
  }
  for (double b : o.adaptive_budgets) {
    s.push_back({absl::StrFormat("cacheblend-adaptive/b=%.3g%s", b, head), o.adaptive_max, sel,
                 o.chunk_head_tokens, 0, 0, b});
  }
  for (int h : o.lookahead_layers) {
    for (double r : o.ratios) {
      s.push_back({absl::StrCat("cacheblend+ahead", h, head), r, "lookahead-deviation",
                   o.chunk_head_tokens, 0, 0, 0, h});
    }
  }
  return s;
}

// ReuseKl: full reuse's KL by (round, prompt).
using ReuseKl = std::map<std::pair<int, int>, double>;
ReuseKl ReuseKlOf(const std::vector<EngineSample>& samples) {
  ReuseKl reuse;
  for (const EngineSample& x : samples) {
    if (x.strategy == "full-reuse") reuse[{x.round, x.prompt}] = x.kl;
  }
  return reuse;
}

// VsReuse: the row's KL over full reuse's, paired by prompt and round, with
// its 95% bootstrap interval (rows that do not blend: left at 0).
void VsReuse(const std::vector<EngineSample>& samples, const ReuseKl& reuse, const Strategy& s,
             EngineRow* row) {
  if (s.name == "full-prefill" || s.name == "prefix-cache" || s.name == "full-reuse") return;
  std::vector<double> num, den;
  for (const EngineSample& x : samples) {
    if (x.strategy != s.name || x.ratio != s.ratio) continue;
    const auto it = reuse.find({x.round, x.prompt});
    if (it == reuse.end()) continue;
    num.push_back(x.kl), den.push_back(it->second);
  }
  double total = 0;
  for (double d : den) total += d;
  if (num.empty() || total <= 0) return;
  const blend::RatioInterval v = blend::BootstrapRatio(num, den);
  row->kl_vs_reuse = v.ratio, row->kl_vs_reuse_lo = v.lo, row->kl_vs_reuse_hi = v.hi;
}

std::vector<EngineRow> Aggregate(const std::vector<EngineSample>& samples,
                                 const std::vector<Strategy>& strategies) {
  std::vector<EngineRow> rows;
  const ReuseKl reuse = ReuseKlOf(samples);
  double full_p50 = 0;
  for (const Strategy& s : strategies) {
    EngineRow row;
    row.strategy = s.name;
    row.ratio = s.ratio;
    std::vector<double> ttft, blend, handover, decode;
    for (const EngineSample& x : samples) {
      if (x.strategy != s.name || x.ratio != s.ratio) continue;
      ttft.push_back(x.ttft_ms), blend.push_back(x.blend_ms);
      handover.push_back(x.handover_ms), decode.push_back(x.decode_ms);
      row.kl += x.kl, row.top1 += x.top1, row.mean_r += x.applied_ratio;
      row.fallbacks += !x.fallback.empty();
      if (x.correct >= 0) row.acc = std::max(0.0, row.acc) + x.correct;
    }
    if (ttft.empty()) continue;
    row.ttft = services::Summarize(ttft);
    row.kl /= ttft.size(), row.top1 /= ttft.size(), row.mean_r /= ttft.size();
    if (row.acc >= 0) row.acc /= ttft.size();
    row.blend_p50 = services::Percentile(blend, 0.5);
    row.handover_p50 = services::Percentile(handover, 0.5);
    row.decode_p50 = services::Percentile(decode, 0.5);
    if (s.name == "full-prefill") full_p50 = row.ttft.p50;
    row.vs_full = full_p50 > 0 ? row.ttft.p50 / full_p50 : 0;
    VsReuse(samples, reuse, s, &row);
    rows.push_back(row);
  }
  return rows;
}

absl::StatusOr<std::string> ModelFile(const EngineBenchOptions& o, const std::string& scratch,
                                      std::ostream& progress) {
  if (!o.model.empty()) return o.model;
  const std::string path = scratch + "/synthetic.gguf";
  progress << "bench engine: writing synthetic:" << o.synthetic << " as " << o.encoding << " GGUF\n";
  RETURN_IF_ERROR(model::WriteSyntheticGguf("synthetic:" + o.synthetic, o.encoding, lc::LibDir(), path));
  return path;
}

}  // namespace

absl::StatusOr<EngineBenchReport> RunEngineBench(const EngineBenchOptions& o,
                                                 std::ostream& progress) {
  if (o.engine != "llama.cpp") {
    return absl::InvalidArgumentError("bench engine: unknown --engine " + o.engine + " (llama.cpp)");
  }
  if (o.task != "text" && o.task != "xchunk") {
    return absl::InvalidArgumentError("bench engine: unknown --task " + o.task + " (text, xchunk)");
  }
  if (o.prompts < 1 || o.chunks < 1 || o.chunk_tokens < 1 || o.query_tokens < 1 || o.repeats < 1) {
    return absl::InvalidArgumentError("bench engine: prompts, chunks, tokens and repeats must be >= 1");
  }
  for (int h : o.lookahead_layers) {
    if (h < 0 || h > blend::kMaxLookaheadLayers) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "bench engine: --lookahead-layers must be in [0, %d]", blend::kMaxLookaheadLayers));
    }
  }
  const bool any_adaptive =
      !o.adaptive_masses.empty() || !o.adaptive_thresholds.empty() || !o.adaptive_budgets.empty();
  if (any_adaptive && o.sidecar_query == "all" && o.adaptive_max > 0.5) {
    // The quality pass replays the applied ratio r; the served pass's first
    // check keeps min(1, 2 cap) r / cap of the rows, the replay's min(1, 2r).
    return absl::InvalidArgumentError(
        "bench engine: --adaptive-max above 0.5 with --sidecar-query all: the quality pass "
        "could not replay the served pass's rows");
  }
  RETURN_IF_ERROR(retrieval::ParseQaSplit(o.split, "bench engine: --split").status());
  if (o.sidecar_query != "first" && o.sidecar_query != "all") {
    return absl::InvalidArgumentError("bench engine: --sidecar-query must be first or all, got " +
                                      o.sidecar_query);
  }
  std::vector<double> adaptive = o.adaptive_masses;
  adaptive.insert(adaptive.end(), o.adaptive_thresholds.begin(), o.adaptive_thresholds.end());
  adaptive.insert(adaptive.end(), o.adaptive_budgets.begin(), o.adaptive_budgets.end());
  for (double m : adaptive) {
    if (!(m > 0 && m <= 1) || !(o.adaptive_max > 0 && o.adaptive_max <= 1)) {
      return absl::InvalidArgumentError(
          "bench engine: --adaptive-masses, --adaptive-thresholds, --adaptive-budgets entries and "
          "--adaptive-max must be in (0, 1]");
    }
  }
  for (const std::string& sel : o.selectors) {
    blend::Selector unused;
    if (!blend::ParseSelector(sel, &unused)) {
      return absl::InvalidArgumentError("bench engine: unknown --selectors entry " + sel);
    }
  }
  kernels::SetMaxThreads(std::max(1, o.threads));
  ti::ScratchDir scratch;
  RETURN_IF_ERROR(scratch.Make(o.scratch_dir));
  ASSIGN_OR_RETURN(const std::string path, ModelFile(o, scratch.dir(), progress));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> ours, model::LoadModel(path));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tok, model::LoadTokenizer(path));
  services::GrpcTtftOptions go;
  go.model_spec = path;
  go.chunk_tokens = o.chunk_tokens;
  go.data_dir = scratch.dir() + "/sidecar";
  go.kv_tiers = o.tiers;
  go.first_position_records = o.first_position_records;
  ASSIGN_OR_RETURN(std::unique_ptr<services::GrpcTtftPath> sidecar, services::GrpcTtftPath::Start(go));
  ASSIGN_OR_RETURN(Texts texts, BuildTexts(o, path, ours->config().vocab_size));
  ASSIGN_OR_RETURN(std::vector<EnginePrompt> prompts,
                   Prepare(texts, *ours, tok->add_bos() ? tok->bos_id() : -1, sidecar.get(),
                           progress));
  size_t longest = 0;
  for (const EnginePrompt& p : prompts) longest = std::max(longest, p.tokens.size());
  lc::ContextOptions co;
  co.n_ctx = static_cast<int>((longest + 16 + 255) / 256 * 256);
  co.threads = o.threads;
  co.contexts = 2;
  ASSIGN_OR_RETURN(std::unique_ptr<lc::LlamaFile> file, lc::LlamaFile::Open(path, co));
  const int vocab = file->vocab_size();
  Runner runner(file.get(), sidecar->client(), &ours->config(),
                std::string(ours->fingerprint().begin(), ours->fingerprint().end()),
                o.sidecar_query == "all");

  EngineBenchReport rep;
  rep.workload = texts.description;
  rep.split = texts.split;
  rep.questions = static_cast<int>(prompts.size());
  rep.split_questions = texts.split_questions;
  rep.file_questions = texts.file_questions;
  rep.prompts_requested = o.prompts;
  rep.cache_pages = MeasureCachePages(ours->config(), static_cast<int64_t>(longest));
  const std::vector<Strategy> strategies = Strategies(o);
  if (o.first_position_records)
    RETURN_IF_ERROR(WarmFirstPositions(prompts, &runner, *sidecar, progress));
  for (int round = -1; round < o.repeats; ++round) {  // round -1: warm-up, not recorded
    if (round == 0) runner.ForgetPrefix();
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (round < 0 && i > 0) break;
      std::vector<float> ref;
      std::string line;
      for (const Strategy& s : strategies) {
        EngineSample x;
        x.prompt = static_cast<int>(i), x.round = round;
        std::vector<float> logits;
        RETURN_IF_ERROR(runner.Run(prompts[i], s, &x, &logits));
        if (s.name == "full-prefill") ref = logits;
        Compare(ref, logits, vocab, &x.kl, &x.top1);
        if (prompts[i].answer >= 0 && logits.size() >= static_cast<size_t>(vocab)) {
          const float* last = logits.data() + logits.size() - vocab;
          x.correct = std::max_element(last, last + vocab) - last == prompts[i].answer;
        }
        absl::StrAppendFormat(&line, " %s%s %.0f ms", s.name,
                              absl::StartsWith(s.name, "cacheblend")
                                  ? absl::StrFormat("@%.2f", s.ratio)
                                  : "",
                              x.ttft_ms);
        if (round >= 0) rep.samples.push_back(std::move(x));
      }
      progress << absl::StrFormat("bench engine: %s prompt %d/%d:%s\n",
                                  round < 0 ? "warm-up" : absl::StrCat("round ", round + 1), i + 1,
                                  prompts.size(), line);
    }
  }
  rep.rows = Aggregate(rep.samples, strategies);
  return rep;
}

}  // namespace ragkv::bench
