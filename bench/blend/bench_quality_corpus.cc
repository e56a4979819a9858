#include "bench/blend/bench_quality_corpus.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "retrieval/chunker.h"
#include "retrieval/corpus_reader.h"
#include "retrieval/embedder.h"
#include "retrieval/qa_split.h"
#include "services/tokenizer_adapter.h"

namespace ragkv::blend {
namespace {

// Pool: every passage of the file, cut, with its embedding.
struct Pool {
  std::map<std::string, int> index;  // doc id -> row
  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> vectors;  // [rows, dim]
  int dim = 0;
};

// PassageTokens: a passage's tokens as `passages` takes them (empty: none).
class PassageTokens {
 public:
  static absl::StatusOr<PassageTokens> Make(const model::Tokenizer& tk, const std::string& passages,
                                            int chunk_tokens) {
    PassageTokens p(tk, chunk_tokens);
    if (passages == "chunker") {
      retrieval::ChunkerOptions co;
      co.target_tokens = chunk_tokens;
      auto adapter = std::make_shared<services::ModelTokenizerAdapter>(&tk);
      ASSIGN_OR_RETURN(p.chunker_, retrieval::Chunker::Create(co, adapter));
    } else if (passages != "cut") {
      return absl::InvalidArgumentError("--passages must be cut or chunker, got " + passages);
    }
    return p;
  }
  absl::StatusOr<std::vector<int32_t>> Of(const std::string& text) const {
    if (chunker_ != nullptr) {
      auto chunks = chunker_->Chunk(text);
      if (!chunks.ok() || chunks->empty()) return std::vector<int32_t>();  // no words
      return (*chunks)[0].token_ids;
    }
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, tk_->Encode(text, false, false));
    if (static_cast<int>(ids.size()) > chunk_tokens_) ids.resize(chunk_tokens_);
    return ids;
  }

 private:
  PassageTokens(const model::Tokenizer& tk, int chunk_tokens)
      : tk_(&tk), chunk_tokens_(chunk_tokens) {}
  const model::Tokenizer* tk_;
  int chunk_tokens_;
  std::shared_ptr<retrieval::Chunker> chunker_;
};

absl::StatusOr<Pool> MakePool(const model::Tokenizer& tk, const retrieval::Corpus& corpus,
                              const CorpusPromptOptions& o) {
  ASSIGN_OR_RETURN(const PassageTokens cut, PassageTokens::Make(tk, o.passages, o.chunk_tokens));
  Pool pool;
  std::vector<std::string> texts;
  for (const auto& d : corpus.documents) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, cut.Of(d.text));
    if (ids.empty()) continue;
    pool.index[d.id] = static_cast<int>(pool.tokens.size());
    texts.push_back(tk.Decode(ids));
    pool.tokens.push_back(std::move(ids));
  }
  ASSIGN_OR_RETURN(auto emb, retrieval::HashedEmbedder::Create({}));
  pool.dim = emb->dim();
  ASSIGN_OR_RETURN(pool.vectors, emb->EmbedDocuments(texts));
  return pool;
}

// Nearest: row `self`'s `k` nearest rows (see the header's rule).
std::vector<int> Nearest(const Pool& pool, int self, int k) {
  const int n = static_cast<int>(pool.tokens.size());
  std::vector<std::pair<float, int>> scored;
  const float* a = pool.vectors.data() + static_cast<size_t>(self) * pool.dim;
  for (int j = 0; j < n; ++j) {
    if (j == self) continue;
    const float* b = pool.vectors.data() + static_cast<size_t>(j) * pool.dim;
    float dot = 0;
    for (int d = 0; d < pool.dim; ++d) dot += a[d] * b[d];
    scored.push_back({-dot, j});
  }
  std::sort(scored.begin(), scored.end());
  std::vector<int> out;
  for (const auto& [neg, j] : scored) {
    if (static_cast<int>(out.size()) == k) break;
    bool copy = pool.tokens[j] == pool.tokens[self];
    for (int t : out) copy = copy || pool.tokens[t] == pool.tokens[j];
    if (!copy) out.push_back(j);
  }
  return out;
}

}  // namespace

absl::StatusOr<CorpusPrompts> LoadCorpusPrompts(const model::Tokenizer& tk,
                                                const CorpusPromptOptions& o) {
  ASSIGN_OR_RETURN(const retrieval::QaSplit split, retrieval::ParseQaSplit(o.split, "--split"));
  ASSIGN_OR_RETURN(retrieval::Corpus corpus,
                   retrieval::ReadCorpusFile(o.path, retrieval::CorpusFormat::kMusique));
  ASSIGN_OR_RETURN(Pool pool, MakePool(tk, corpus, o));
  const std::vector<retrieval::QaExample> questions =
      retrieval::FilterQaSplit(corpus.questions, split);
  CorpusPrompts out;
  for (const auto& q : questions) {
    if (static_cast<int>(out.prompts.size()) == o.prompts) break;
    if (static_cast<int>(q.passage_doc_ids.size()) < o.chunks) continue;
    CorpusPrompt p;
    bool usable = true;
    for (int c = 0; c < o.chunks && usable; ++c) {
      auto it = pool.index.find(q.passage_doc_ids[c]);
      usable = it != pool.index.end();
      if (!usable) break;
      p.chunks.push_back(pool.tokens[it->second]);
      std::vector<std::vector<int32_t>> nbr;
      for (int j : Nearest(pool, it->second, o.max_neighbours)) nbr.push_back(pool.tokens[j]);
      p.neighbours.push_back(std::move(nbr));
    }
    if (!usable) continue;
    ASSIGN_OR_RETURN(p.query, tk.Encode(q.question, false, false));
    if (static_cast<int>(p.query.size()) > o.query_tokens) p.query.resize(o.query_tokens);
    if (p.query.empty()) continue;
    out.prompts.push_back(std::move(p));
  }
  if (out.prompts.empty()) {
    return absl::NotFoundError(absl::StrCat("quality bench: no question of split ", o.split, " in ",
                                            o.path, " has ", o.chunks, " passages"));
  }
  out.description = absl::StrFormat(
      "corpus %s, split %s (%d of its %d questions): %d questions, %d passages each %s %d "
      "tokens, neighbours from all %d passages",
      o.path, retrieval::QaSplitName(split), questions.size(), corpus.questions.size(),
      out.prompts.size(), o.chunks,
      o.passages == "chunker" ? "the chunker's first chunk of <=" : "cut to", o.chunk_tokens,
      pool.tokens.size());
  return out;
}

}  // namespace ragkv::blend
