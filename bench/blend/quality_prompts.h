// quality_prompts.h: the prompts of `ragkv bench quality` and `ragkv bench
// oracle` (bench_quality.h says what each task's prompt is): the tokens,
// the continuation sampled after them and every chunk's precomputed KV.
//
// Thread safety: pure functions (all state is in the arguments).
#ifndef RAGKV_BENCH_BLEND_QUALITY_PROMPTS_H_
#define RAGKV_BENCH_BLEND_QUALITY_PROMPTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/blend/quality_options.h"
#include "bench/blend/bench_quality_corpus.h"
#include "blend/kv_source.h"
#include "model/model.h"

namespace ragkv::blend {

// PromptData: one prompt: a 1-token system prefix (BOS), the chunks, the
// query and the continuation, with the records the blends read.
struct PromptData {
  std::vector<int32_t> prefix;
  std::vector<std::vector<int32_t>> chunks;
  std::vector<int32_t> query;
  std::vector<int32_t> continuation;
  std::vector<std::unique_ptr<ChunkKV>> kv;  // [0] prefix, then chunks
  // The same KV through each measured codec (key: kvstore::Codec).
  std::map<int, std::vector<std::unique_ptr<ChunkKV>>> coded;
  // Neighbour-aware records per k: [0] the prefix (as in kv), then chunks.
  std::map<int, std::vector<std::unique_ptr<ChunkKV>>> nbr;
  std::vector<std::vector<std::vector<int32_t>>> neighbours;  // musique: per chunk
  int32_t answer = -1;                       // xchunk: the expected next token after the query
};

// NeighbourCost: what the records of one variant cost (k = 0: plain).
struct NeighbourCost {
  double seconds = 0, context_tokens = 0, records = 0, bytes = 0;
};

// BlendPrompt: the Blender over p's prefix, chunks and query, the records
// read from `kvs` ([0] the prefix, then the chunks: p.kv, a codec's or a
// neighbours variant), logits of every query row, room for
// `extra_capacity` more tokens after it.
absl::StatusOr<BlendResult> BlendPrompt(const Blender& b, const PromptData& p,
                                        const std::vector<std::unique_ptr<ChunkKV>>& kvs,
                                        BlendOptions o, int64_t extra_capacity = 0);

// LoadQualityModel: o.model_path with o.max_seq_len and o.kv_dtype.
absl::StatusOr<std::unique_ptr<model::Model>> LoadQualityModel(const QualityBenchOptions& o);

// LoadQualityCorpus: o.task "musique"'s prompts (LoadCorpusPrompts of
// o.corpus, o.corpus_split, with room for the largest of o.neighbours);
// null for the other tasks. The corpus's and tokenizer's errors pass through.
absl::StatusOr<std::unique_ptr<CorpusPrompts>> LoadQualityCorpus(const QualityBenchOptions& o);

// MakePrompt: prompt `index` of o.task (story: sampled from the model by
// o.seed; xchunk: blend::MakeXchunkPrompt; musique: corpus->prompts[index],
// its continuation sampled), every chunk precomputed (plain records timed
// into (*cost)[0], and the neighbour-aware ones of o.neighbours into
// (*cost)[k], when cost is given). OutOfRange when the prompt does not fit
// the model context; the model's errors pass through.
absl::StatusOr<PromptData> MakePrompt(const model::Model& m, const QualityBenchOptions& o,
                                      int index, const CorpusPrompts* corpus,
                                      std::map<int, NeighbourCost>* cost);

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_QUALITY_PROMPTS_H_
