// ttft_workload.cc: the prompts of `ragkv bench ttft` (internal/ttft_internal.h):
// the first `chunks` passages of corpus questions, or synthetic shapes.
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "retrieval/corpus_reader.h"
#include "retrieval/qa_split.h"

namespace ragkv::services::ttft_internal {
namespace {

// CorpusWorkload: the first o.prompts usable questions of split o.split (in
// file order; fewer when the split has fewer), each question's first
// o.chunks passages, tokenized and cut to o.chunk_tokens, then the question
// as the query (cut to o.query_tokens). Errors: a bad split name
// (InvalidArgument), tokenizer / corpus load, no usable question.
absl::StatusOr<Workload> CorpusWorkload(const TtftBenchOptions& o, int vocab) {
  ASSIGN_OR_RETURN(const retrieval::QaSplit split, retrieval::ParseQaSplit(o.split, "--split"));
  Workload w;
  std::vector<Prompt>& prompts = w.prompts;
  std::unique_ptr<model::Tokenizer> tk;
  if (!o.tokenizer.empty()) {
    ASSIGN_OR_RETURN(tk, model::LoadTokenizer(o.tokenizer));
  } else if (absl::StartsWith(o.model_spec, "synthetic:")) {
    ASSIGN_OR_RETURN(tk, model::MakeByteTokenizer(vocab));
  } else {
    ASSIGN_OR_RETURN(tk, model::LoadTokenizer(o.model_spec));
  }
  ASSIGN_OR_RETURN(retrieval::Corpus corpus,
                   retrieval::ReadCorpusFile(o.corpus, retrieval::CorpusFormat::kMusique));
  std::unordered_map<std::string, const retrieval::Document*> docs;
  for (const auto& d : corpus.documents) docs[d.id] = &d;
  const std::vector<retrieval::QaExample> questions =
      retrieval::FilterQaSplit(corpus.questions, split);
  w.split = std::string(retrieval::QaSplitName(split));
  w.split_questions = static_cast<int>(questions.size());
  w.file_questions = static_cast<int>(corpus.questions.size());
  for (const auto& q : questions) {
    if (static_cast<int>(prompts.size()) >= o.prompts) break;
    if (static_cast<int>(q.passage_doc_ids.size()) < o.chunks) continue;
    Prompt p;
    for (int i = 0; i < o.chunks; ++i) {
      auto it = docs.find(q.passage_doc_ids[i]);
      if (it == docs.end()) break;
      ASSIGN_OR_RETURN(auto ids, tk->Encode(it->second->text, false, false));
      if (ids.empty()) break;
      if (static_cast<int>(ids.size()) > o.chunk_tokens) ids.resize(o.chunk_tokens);
      p.chunks.push_back(std::move(ids));
      p.texts.push_back(it->second->text);
    }
    if (static_cast<int>(p.chunks.size()) != o.chunks) continue;
    ASSIGN_OR_RETURN(p.query, tk->Encode(q.question, false, false));
    if (p.query.empty()) continue;
    if (static_cast<int>(p.query.size()) > o.query_tokens) p.query.resize(o.query_tokens);
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench ttft: no question of split ", w.split, " in ", o.corpus, " has ", o.chunks,
        " passages"));
  }
  w.description = absl::StrFormat(
      "corpus %s, split %s (%d of its %d questions): %d questions, top-%d passages cut to %d "
      "tokens",
      o.corpus, w.split, w.split_questions, w.file_questions, prompts.size(), o.chunks,
      o.chunk_tokens);
  if (static_cast<int>(prompts.size()) < o.prompts) {
    absl::StrAppendFormat(&w.description, " (--prompts %d: only %d usable in split %s, all used)",
                          o.prompts, prompts.size(), w.split);
  }
  return w;
}

// SyntheticWorkload: o.prompts prompts of o.chunks random chunks of
// o.chunk_tokens tokens (with_grpc: texts for the sidecar instead, their
// tokens come from its catalogue) + an o.query_tokens random query.
Workload SyntheticWorkload(const TtftBenchOptions& o, bool with_grpc, TokenRng& rng) {
  Workload w;
  std::vector<Prompt>& prompts = w.prompts;
  for (int i = 0; i < o.prompts; ++i) {
    Prompt p;
    p.chunks.resize(o.chunks);
    for (int ci = 0; ci < o.chunks; ++ci) {
      auto& c = p.chunks[ci];
      if (with_grpc) {
        // Text the sidecar ingests; the tokens come from its catalogue.
        p.texts.push_back(SyntheticChunkText(
            o.chunk_tokens, o.seed * 1000003 + static_cast<uint64_t>(i) * 1024 + ci));
        continue;
      }
      c.resize(o.chunk_tokens);
      for (auto& t : c) t = rng.Next();
    }
    p.query.resize(o.query_tokens);
    for (auto& t : p.query) t = rng.Next();
    prompts.push_back(std::move(p));
  }
  w.description = absl::StrFormat("synthetic: %d prompts x (%d chunks x %d tokens + %d query)",
                                  o.prompts, o.chunks, o.chunk_tokens, o.query_tokens);
  return w;
}

}  // namespace

absl::StatusOr<Workload> BuildWorkload(const TtftBenchOptions& o, int vocab, bool with_grpc,
                                       TokenRng& rng) {
  if (!o.corpus.empty()) return CorpusWorkload(o, vocab);
  return SyntheticWorkload(o, with_grpc, rng);
}

}  // namespace ragkv::services::ttft_internal
