// calibrate.cc: `ragkv calibrate`, the per-model quality gate's measurement
// (docs/quality_gate.md): canary prompts from a text corpus (or the xchunk
// task) through full prefill and CacheBlend at every candidate ratio and
// selector; the cheapest setting meeting --target-kl / --target-top1 (or
// "blending off") is stored for the model's fingerprint in the data dir,
// where `ragkv serve --data-dir` reads it at start. With --task xchunk the
// choice is made on the dev seed's canaries and the chosen setting is then
// reported on the test seed's (printed only; the record is unchanged).
// Exit code: 0 stored, 1 the work failed (nothing stored), 2 bad usage.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "blend/quality_gate.h"
#include "blend/xchunk_task.h"
#include "cli/command.h"
#include "model/loader.h"

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

// CorpusPrompts: consecutive windows of the tokenized corpus, each
// `chunks` chunks of `chunk_tokens` then a query of `query_tokens`, after BOS.
absl::StatusOr<std::vector<blend::CanaryPrompt>> CorpusPrompts(const CalibrateFlags& f,
                                                               const model::Tokenizer& tok) {
  ASSIGN_OR_RETURN(std::string text, CorpusText(f.corpus));
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(text, /*add_bos=*/false, /*add_eos=*/false));
  const size_t per = static_cast<size_t>(f.chunks) * f.chunk_tokens + f.query_tokens;
  if (ids.size() < per) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "corpus %s is too small: %d tokens, one canary prompt needs %d (%d x %d + %d)", f.corpus,
        ids.size(), per, f.chunks, f.chunk_tokens, f.query_tokens));
  }
  std::vector<blend::CanaryPrompt> out;
  const size_t n = std::min<size_t>(f.prompts, ids.size() / per);
  const size_t stride = ids.size() / n;
  for (size_t i = 0; i < n; ++i) {
    blend::CanaryPrompt p;
    if (tok.add_bos()) p.prefix = {tok.bos_id()};  // as served prompts start
    auto it = ids.begin() + static_cast<std::ptrdiff_t>(i * stride);
    for (int c = 0; c < f.chunks; ++c, it += f.chunk_tokens) p.chunks.emplace_back(it, it + f.chunk_tokens);
    p.query.assign(it, it + f.query_tokens);
    out.push_back(std::move(p));
  }
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

// PrintTest: one line, printed whether or not the test figures meet the targets.
void PrintTest(const std::optional<blend::GateCandidate>& c, int prompts) {
  if (!c.has_value()) {
    std::printf("test (seed %llu): blending off, served as full prefill: nothing to report\n",
                static_cast<unsigned long long>(blend::kXchunkCanaryTestSeed));
    return;
  }
  std::printf("test (seed %llu, %d prompts, chosen on dev seed %llu): selector=%s r=%.2f "
              "kl=%.6f top1=%.4f %s\n",
              static_cast<unsigned long long>(blend::kXchunkCanaryTestSeed), prompts,
              static_cast<unsigned long long>(blend::kXchunkCanaryDevSeed),
              SelectorName(c->selector), c->ratio, c->kl, c->top1,
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
    std::vector<blend::CanaryPrompt> prompts;
    if (f_.task == "xchunk") {
      ASSIGN_OR_RETURN(prompts, TaskPrompts(f_, blend::kXchunkCanaryDevSeed));
    } else {
      std::string tp = f_.tokenizer;
      if (tp.empty()) {
        ASSIGN_OR_RETURN(tp, model::DefaultTokenizerPath(f_.model));
      }
      ASSIGN_OR_RETURN(auto tok, model::LoadTokenizer(tp));
      ASSIGN_OR_RETURN(prompts, CorpusPrompts(f_, *tok));
    }
    ASSIGN_OR_RETURN(auto blender, blend::Blender::Create({m.get()}));
    blend::CalibrateOptions co;
    co.targets = {f_.target_kl, f_.target_top1};
    co.ratios = f_.ratios;
    std::fprintf(stderr, "ragkv calibrate: %zu prompts x %zu candidates...\n", prompts.size(),
                 co.ratios.size() * co.selectors.size());
    ASSIGN_OR_RETURN(blend::GateRecord rec, blend::Calibrate(*blender, prompts, co));
    // --task xchunk: the choice above is the dev seed's; its figures on the
    // test seed are measured before anything is stored.
    std::optional<blend::GateCandidate> test_figures;
    if (f_.task == "xchunk") {
      ASSIGN_OR_RETURN(auto test, TaskPrompts(f_, blend::kXchunkCanaryTestSeed));
      ASSIGN_OR_RETURN(test_figures, MeasureOnTest(*blender, rec, test));
    }
    RETURN_IF_ERROR(blend::WriteGateRecord(f_.data_dir, rec));
    PrintRecord(rec, blend::GateRecordPath(f_.data_dir, rec.fingerprint));
    if (f_.task == "xchunk") PrintTest(test_figures, f_.prompts);
    return absl::OkStatus();
  }

  CalibrateFlags f_;
};

}  // namespace

std::unique_ptr<Command> NewCalibrateCommand() { return std::make_unique<CalibrateCommand>(); }

}  // namespace ragkv::cli
