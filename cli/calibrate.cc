// calibrate.cc: `ragkv calibrate`, the per-model quality gate's measurement
// (docs/quality_gate.md): canary prompts from a text corpus (or the xchunk
// task) through full prefill and CacheBlend at every candidate ratio and
// selector; the cheapest setting meeting --target-kl / --target-top1 (or
// "blending off") is stored for the model's fingerprint in the data dir,
// where `ragkv serve --data-dir` reads it at start. The choice is made on
// dev canaries and the chosen setting is then reported on test ones
// (printed only; the record is unchanged): xchunk by seed, a MuSiQue .json
// corpus by question id, any other corpus by alternate windows.
// Exit code: 0 stored, 1 the work failed (nothing stored), 2 bad usage.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "blend/quality_gate.h"
#include "blend/xchunk_task.h"
#include "cli/command.h"
#include "model/loader.h"
#include "retrieval/corpus_reader.h"
#include "retrieval/qa_split.h"

namespace ragkv::cli {
namespace {

struct CalibrateFlags {
  std::string model, tokenizer, corpus, task, data_dir;
  double target_kl = blend::GateTargets{}.max_kl;
  double target_top1 = blend::GateTargets{}.min_top1;
  int prompts = 16, chunks = 3, chunk_tokens = 64, query_tokens = 16, max_seq_len = 0;
  std::vector<double> ratios = blend::CalibrateOptions{}.ratios;
};

// CorpusText: a file, or every regular file of a directory (sorted).
absl::StatusOr<std::string> CorpusText(const std::string& path) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else if (std::filesystem::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    return absl::NotFoundError(absl::StrCat("corpus ", path, ": no such file or directory"));
  }
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    text += "\n";
  }
  return text;
}

// Canaries: the prompts a setting is chosen on (dev) and those its figures
// are then reported on (test).
struct Canaries {
  std::vector<blend::CanaryPrompt> dev, test;
  std::string split;  // how they were split, for the report
};

// TextCanaries: windows of the tokenized corpus, each `chunks` chunks of
// `chunk_tokens` then a query of `query_tokens`, after BOS: 2 x --prompts
// windows spread evenly, even ones dev, odd ones test.
absl::StatusOr<Canaries> TextCanaries(const CalibrateFlags& f, const model::Tokenizer& tok) {
  ASSIGN_OR_RETURN(std::string text, CorpusText(f.corpus));
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(text, /*add_bos=*/false, /*add_eos=*/false));
  const size_t per = static_cast<size_t>(f.chunks) * f.chunk_tokens + f.query_tokens;
  if (ids.size() < 2 * per) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "corpus %s is too small: %d tokens, a dev and a test canary need %d (2 x (%d x %d + %d))",
        f.corpus, ids.size(), 2 * per, f.chunks, f.chunk_tokens, f.query_tokens));
  }
  Canaries out;
  out.split = "text windows: even dev, odd test";
  const size_t n = std::min<size_t>(2 * static_cast<size_t>(f.prompts), ids.size() / per);
  const size_t stride = ids.size() / n;
  for (size_t i = 0; i < n; ++i) {
    blend::CanaryPrompt p;
    if (tok.add_bos()) p.prefix = {tok.bos_id()};  // as served prompts start
    auto it = ids.begin() + static_cast<std::ptrdiff_t>(i * stride);
    for (int c = 0; c < f.chunks; ++c, it += f.chunk_tokens) p.chunks.emplace_back(it, it + f.chunk_tokens);
    p.query.assign(it, it + f.query_tokens);
    (i % 2 == 0 ? out.dev : out.test).push_back(std::move(p));
  }
  return out;
}

// QuestionCanaries: a MuSiQue-style .json corpus: per question of a split
// (retrieval/qa_split.h), its first `chunks` passages cut to `chunk_tokens`
// and the question (cut to `query_tokens`) as the query; at most --prompts.
absl::StatusOr<std::vector<blend::CanaryPrompt>> QuestionCanaries(
    const CalibrateFlags& f, const model::Tokenizer& tok, const retrieval::Corpus& corpus,
    retrieval::QaSplit split) {
  std::unordered_map<std::string, const retrieval::Document*> docs;
  for (const auto& d : corpus.documents) docs[d.id] = &d;
  std::vector<blend::CanaryPrompt> out;
  for (const retrieval::QaExample& q : retrieval::FilterQaSplit(corpus.questions, split)) {
    if (static_cast<int>(out.size()) >= f.prompts) break;
    if (static_cast<int>(q.passage_doc_ids.size()) < f.chunks) continue;
    blend::CanaryPrompt p;
    if (tok.add_bos()) p.prefix = {tok.bos_id()};
    for (int i = 0; i < f.chunks; ++i) {
      auto it = docs.find(q.passage_doc_ids[i]);
      if (it == docs.end()) break;
      ASSIGN_OR_RETURN(auto ids, tok.Encode(it->second->text, false, false));
      if (static_cast<int>(ids.size()) > f.chunk_tokens) ids.resize(f.chunk_tokens);
      if (!ids.empty()) p.chunks.push_back(std::move(ids));
    }
    ASSIGN_OR_RETURN(p.query, tok.Encode(q.question, false, false));
    if (static_cast<int>(p.query.size()) > f.query_tokens) p.query.resize(f.query_tokens);
    if (static_cast<int>(p.chunks.size()) == f.chunks && !p.query.empty()) out.push_back(std::move(p));
  }
  if (out.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "corpus %s: no %s question has %d passages", f.corpus, retrieval::QaSplitName(split),
        f.chunks));
  }
  return out;
}

// CorpusCanaries: MuSiQue-style JSON by its questions' dev/test split, any
// other corpus by TextCanaries.
absl::StatusOr<Canaries> CorpusCanaries(const CalibrateFlags& f, const model::Tokenizer& tok) {
  if (!absl::EndsWith(f.corpus, ".json")) return TextCanaries(f, tok);
  ASSIGN_OR_RETURN(retrieval::Corpus corpus,
                   retrieval::ReadCorpusFile(f.corpus, retrieval::CorpusFormat::kMusique));
  Canaries out;
  out.split = "MuSiQue questions: dev / test by question id (docs/quality_gate.md)";
  ASSIGN_OR_RETURN(out.dev, QuestionCanaries(f, tok, corpus, retrieval::QaSplit::kDev));
  ASSIGN_OR_RETURN(out.test, QuestionCanaries(f, tok, corpus, retrieval::QaSplit::kTest));
  return out;
}

// TaskPrompts: the instrument's canaries of `seed` (kXchunkCanaryDevSeed to
// choose, kXchunkCanaryTestSeed to report: blend/xchunk_task.h's split;
// both stay apart from the bench's default seeds).
absl::StatusOr<std::vector<blend::CanaryPrompt>> TaskPrompts(const CalibrateFlags& f,
                                                             uint64_t seed) {
  std::vector<blend::CanaryPrompt> out;
  for (int i = 0; i < f.prompts; ++i) {
    ASSIGN_OR_RETURN(blend::XchunkPrompt x, blend::MakeXchunkPrompt(seed, i, 32, 4));
    out.push_back({x.prefix, x.chunks, x.query});
  }
  return out;
}

void PrintRecord(const blend::GateRecord& r, const std::string& path) {
  for (const blend::GateCandidate& c : r.candidates) {
    std::printf("candidate selector=%s r=%.2f kl=%.6f top1=%.4f %s\n", SelectorName(c.selector),
                c.ratio, c.kl, c.top1, c.meets ? "meets" : "-");
  }
  if (r.blending) {
    std::printf("chosen: CacheBlend r=%.2f selector=%s (kl<=%g top1>=%g, %d prompts)\n", r.ratio,
                SelectorName(r.selector), r.targets.max_kl, r.targets.min_top1, r.prompts);
  } else {
    std::printf("chosen: blending OFF: no candidate meets kl<=%g top1>=%g; the model is served "
                "as full prefill\n", r.targets.max_kl, r.targets.min_top1);
  }
  std::printf("stored: %s\n", path.c_str());
}

// MeasureOnTest: the chosen setting of `rec` on the test split's canaries
// (nullopt when blending is off). The figures are not used for the choice.
absl::StatusOr<std::optional<blend::GateCandidate>> MeasureOnTest(
    const blend::Blender& blender, const blend::GateRecord& rec,
    const std::vector<blend::CanaryPrompt>& test) {
  if (!rec.blending) return std::nullopt;
  blend::CalibrateOptions co;
  co.targets = rec.targets;
  co.ratios = {rec.ratio};
  co.selectors = {rec.selector};
  ASSIGN_OR_RETURN(blend::GateRecord t, blend::Calibrate(blender, test, co));
  return t.candidates.front();
}

// PrintTest: one line, printed whether or not the test figures meet the
// targets; `split` says how dev and test were drawn.
void PrintTest(const std::optional<blend::GateCandidate>& c, int prompts,
               const std::string& split) {
  if (!c.has_value()) {
    std::printf("test (%s): blending off, served as full prefill: nothing to report\n",
                split.c_str());
    return;
  }
  std::printf("test (%d prompts; chosen on dev; %s): selector=%s r=%.2f kl=%.6f top1=%.4f %s\n",
              prompts, split.c_str(), SelectorName(c->selector), c->ratio, c->kl, c->top1,
              c->meets ? "meets the targets" : "MISSES the targets");
}

class CalibrateCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--model", f_.model, "checkpoint")->required();
    cmd->add_option("--data-dir", f_.data_dir, "the data dir `ragkv serve` uses")->required();
    cmd->add_option("--corpus", f_.corpus, "text file or directory of canary text");
    cmd->add_option("--task", f_.task, "xchunk: canaries from the instrument's task");
    cmd->add_option("--tokenizer", f_.tokenizer, "tokenizer (default: the model's)");
    cmd->add_option("--target-kl", f_.target_kl, "max mean KL vs full prefill")->capture_default_str();
    cmd->add_option("--target-top1", f_.target_top1, "min top-1 agreement")->capture_default_str();
    cmd->add_option("--prompts", f_.prompts)->capture_default_str();
    cmd->add_option("--chunks", f_.chunks)->capture_default_str();
    cmd->add_option("--chunk-tokens", f_.chunk_tokens)->capture_default_str();
    cmd->add_option("--query-tokens", f_.query_tokens)->capture_default_str();
    cmd->add_option("--ratios", f_.ratios)->delimiter(',')->capture_default_str();
    cmd->add_option("--max-seq-len", f_.max_seq_len, "context override (0: the model's)");
  }
  int Run() override {
    if (f_.corpus.empty() == f_.task.empty() || (!f_.task.empty() && f_.task != "xchunk") ||
        f_.prompts <= 0 || f_.chunks <= 0 || f_.chunk_tokens <= 0 || f_.query_tokens <= 0) {
      std::fprintf(stderr, "ragkv calibrate: give one of --corpus PATH or --task xchunk, and "
                           "positive counts\n");
      return 2;
    }
    absl::Status s = Calibrate();
    if (!s.ok()) {
      std::fprintf(stderr, "ragkv calibrate: %s (nothing stored)\n", s.ToString().c_str());
      return 1;
    }
    return 0;
  }

 private:
  absl::Status Calibrate() {
    model::LoadOptions lo;
    lo.max_seq_len = f_.max_seq_len;
    ASSIGN_OR_RETURN(auto m, model::LoadModel(f_.model, lo));
    Canaries canaries;
    if (f_.task == "xchunk") {
      ASSIGN_OR_RETURN(canaries.dev, TaskPrompts(f_, blend::kXchunkCanaryDevSeed));
      ASSIGN_OR_RETURN(canaries.test, TaskPrompts(f_, blend::kXchunkCanaryTestSeed));
      canaries.split = absl::StrFormat("xchunk seeds: dev %d, test %d", blend::kXchunkCanaryDevSeed,
                                       blend::kXchunkCanaryTestSeed);
    } else {
      std::string tp = f_.tokenizer;
      if (tp.empty()) {
        ASSIGN_OR_RETURN(tp, model::DefaultTokenizerPath(f_.model));
      }
      ASSIGN_OR_RETURN(auto tok, model::LoadTokenizer(tp));
      ASSIGN_OR_RETURN(canaries, CorpusCanaries(f_, *tok));
    }
    ASSIGN_OR_RETURN(auto blender, blend::Blender::Create({m.get()}));
    blend::CalibrateOptions co;
    co.targets = {f_.target_kl, f_.target_top1};
    co.ratios = f_.ratios;
    std::fprintf(stderr, "ragkv calibrate: %zu dev prompts x %zu candidates (%s)...\n",
                 canaries.dev.size(), co.ratios.size() * co.selectors.size(),
                 canaries.split.c_str());
    ASSIGN_OR_RETURN(blend::GateRecord rec, blend::Calibrate(*blender, canaries.dev, co));
    // The choice above is dev's; its figures on test are measured before
    // anything is stored, and printed whether or not they meet the targets.
    ASSIGN_OR_RETURN(std::optional<blend::GateCandidate> test_figures,
                     MeasureOnTest(*blender, rec, canaries.test));
    RETURN_IF_ERROR(blend::WriteGateRecord(f_.data_dir, rec));
    PrintRecord(rec, blend::GateRecordPath(f_.data_dir, rec.fingerprint));
    PrintTest(test_figures, static_cast<int>(canaries.test.size()), canaries.split);
    return absl::OkStatus();
  }

  CalibrateFlags f_;
};

}  // namespace

std::unique_ptr<Command> NewCalibrateCommand() { return std::make_unique<CalibrateCommand>(); }

}  // namespace ragkv::cli
