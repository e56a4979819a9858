// bench_quality_corpus.h: the prompts of `ragkv bench quality --task
// musique`: MuSiQue questions over their own passages, and each passage's
// nearest passages in the whole file (what a neighbour-aware record is
// precomputed after; docs/kv_format.md "Neighbour-aware records").
//
// Prompt i: the i-th question of the split (retrieval/qa_split.h, file
// order) with at least `chunks` passages; its first `chunks` passages, each
// tokenized (no BOS) and cut to `chunk_tokens` (passages "cut"), or each
// the first chunk that the sidecar's chunker makes of its text with
// target_tokens = `chunk_tokens` (passages "chunker": word and sentence
// ends, as `ragkv serve` and `bench engine --passages chunker` have them);
// the question, cut to `query_tokens`, as the query.
// Neighbours: every passage of the file (both splits: the index a server
// would hold), cut the same way, embedded by the retriever's default dense
// embedder (HashedEmbedder, default options) over the text of its kept
// tokens; a passage's neighbours are the others by inner product, nearest
// first, skipping a passage of the same tokens as it or as one already
// taken (Retriever::NearestChunks' rule, over a flat index of the
// passages' first chunks).
//
// Thread safety: pure function.
#ifndef RAGKV_BENCH_BLEND_BENCH_QUALITY_CORPUS_H_
#define RAGKV_BENCH_BLEND_BENCH_QUALITY_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer.h"

namespace ragkv::blend {

struct CorpusPrompt {
  std::vector<std::vector<int32_t>> chunks;
  // neighbours[c]: chunk c's nearest passages' tokens, nearest first (up to
  // max_neighbours of them).
  std::vector<std::vector<std::vector<int32_t>>> neighbours;
  std::vector<int32_t> query;
};

struct CorpusPrompts {
  std::vector<CorpusPrompt> prompts;
  std::string description;  // "corpus X, split dev (N of its M questions): ..."
};

struct CorpusPromptOptions {
  std::string path;          // MuSiQue-style JSON (required)
  std::string split = "dev";  // dev | test | all
  int prompts = 50;          // at most this many (fewer when the split has fewer)
  int chunks = 6;
  int chunk_tokens = 64;
  int query_tokens = 32;
  int max_neighbours = 0;    // neighbours listed per chunk
  std::string passages = "cut";  // cut | chunker (see the file comment)
};

// LoadCorpusPrompts: as the file comment says. Errors: the corpus, split or
// passages name (InvalidArgument), no usable question (NotFound), the embedder's.
absl::StatusOr<CorpusPrompts> LoadCorpusPrompts(const model::Tokenizer& tokenizer,
                                                const CorpusPromptOptions& options);

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_BENCH_QUALITY_CORPUS_H_
