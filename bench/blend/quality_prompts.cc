#include "bench/blend/quality_prompts.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "blend/store_source.h"
#include "blend/xchunk_task.h"
#include "model/generate.h"
#include "model/loader.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

namespace ragkv::blend {
namespace {


// Generates `n` tokens after `context` by temperature + top-p sampling
// (model::SampleTopP; one uniform draw of `rng` per token); `banned` ids are
// never drawn. OutOfRange when the n tokens do not fit the model context.
absl::StatusOr<std::vector<int32_t>> Generate(const model::Model& m,
                                              const std::vector<int32_t>& context, int n,
                                              const QualityBenchOptions& o,
                                              const std::vector<int32_t>& banned,
                                              std::mt19937_64* rng) {
  model::SampleScratch scratch;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  ASSIGN_OR_RETURN(
      std::vector<int32_t> out,
      model::Generate(m, context, n, [&](float* logits, int32_t vocab) {
        for (int32_t b : banned) logits[b] = -INFINITY;
        return model::SampleTopP(logits, vocab, std::max(1e-6f, o.temperature), o.top_p,
                                 static_cast<float>(coin(*rng)), &scratch);
      }));
  if (static_cast<int>(out.size()) != n) {
    return absl::OutOfRangeError(absl::StrCat("quality bench: ", context.size(), " + ", n,
                                              " tokens exceed the model context of ",
                                              m.config().max_seq_len));
  }
  return out;
}

// PrecomputeNeighbours: every chunk's record after [BOS] + its k nearest
// passages (nearest last), timed into (*cost)[k].
absl::Status PrecomputeNeighbours(const model::Model& m, const QualityBenchOptions& o,
                                  PromptData* p, std::map<int, NeighbourCost>* cost) {
  for (int k : o.neighbours) {
    auto& recs = p->nbr[k];
    recs.push_back(std::make_unique<ChunkKV>(*p->kv[0]));
    for (size_t c = 0; c < p->chunks.size(); ++c) {
      NeighbourContext ctx;
      ctx.lead = p->prefix;
      const auto& near = p->neighbours[c];
      const int n = std::min<int>(k, static_cast<int>(near.size()));
      for (int j = n - 1; j >= 0; --j) ctx.neighbours.push_back(near[j]);
      const auto t0 = Clock::now();
      ASSIGN_OR_RETURN(ChunkKV ck, PrecomputeChunkInContext(m, ctx.Tokens(), p->chunks[c],
                                                            m.config().kv_dtype));
      (*cost)[k].seconds += SecondsSince(t0);
      ASSIGN_OR_RETURN(StoreChunk enc, EncodeNeighbourRecord(ck, ctx));
      (*cost)[k].bytes += static_cast<double>(enc.chunk->TotalBytes());
      (*cost)[k].context_tokens += static_cast<double>(ck.info.first_position);
      (*cost)[k].records += 1;
      recs.push_back(std::make_unique<ChunkKV>(std::move(ck)));
    }
  }
  return absl::OkStatus();
}

// Precompute: the prefix's and every chunk's KV, as the store would hold them
// (plain records timed into (*cost)[0] when cost is given).
absl::Status Precompute(const model::Model& m, const QualityBenchOptions& o, PromptData* p,
                        std::map<int, NeighbourCost>* cost = nullptr) {
  ASSIGN_OR_RETURN(ChunkKV pk, PrecomputeChunk(m, p->prefix));
  p->kv.push_back(std::make_unique<ChunkKV>(std::move(pk)));
  for (const auto& c : p->chunks) {
    const auto t0 = Clock::now();
    // --first-position: the first chunk's record computed right after the
    // prompt's prefix (its rows exact: pipeline.h first_position_records).
    const bool first = o.first_position && !p->prefix.empty() && &c == &p->chunks[0];
    ASSIGN_OR_RETURN(ChunkKV ck,
                     first ? PrecomputeChunkInContext(m, p->prefix, c, m.config().kv_dtype)
                     : o.condition_on_prefix
                         ? PrecomputeChunkAfter(m, p->prefix, c, m.config().kv_dtype)
                         : PrecomputeChunk(m, c));
    if (cost != nullptr) {
      (*cost)[0].seconds += SecondsSince(t0);
      uint64_t bytes = 0;  // the record's size, whatever context it was computed in
      RETURN_IF_ERROR(ThroughCodec(ck, kvstore::Codec::kRaw, &bytes).status());
      (*cost)[0].bytes += static_cast<double>(bytes);
      (*cost)[0].records += 1;
    }
    p->kv.push_back(std::make_unique<ChunkKV>(std::move(ck)));
  }
  if (cost != nullptr && !o.neighbours.empty()) RETURN_IF_ERROR(PrecomputeNeighbours(m, o, p, cost));
  return absl::OkStatus();
}

absl::StatusOr<PromptData> MakeXchunk(const model::Model& m, const QualityBenchOptions& o,
                                      int index) {
  ASSIGN_OR_RETURN(XchunkPrompt x, MakeXchunkPrompt(o.seed, index, o.pairs, o.chunks));
  PromptData p;
  p.prefix = std::move(x.prefix);
  p.chunks = std::move(x.chunks);
  p.query = std::move(x.query);
  p.continuation = {x.answer};
  p.answer = x.answer;
  RETURN_IF_ERROR(Precompute(m, o, &p));
  return p;
}

// MakeMusique: prompt `index` of the corpus, its continuation sampled after it.
absl::StatusOr<PromptData> MakeMusique(const model::Model& m, const QualityBenchOptions& o,
                                       const CorpusPrompt& cp, int index,
                                       std::map<int, NeighbourCost>* cost) {
  std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) * 7919 + 1);
  const int32_t bos = 1, eos = 2;
  PromptData p;
  p.prefix = {bos};
  p.chunks = cp.chunks;
  p.neighbours = cp.neighbours;
  p.query = cp.query;
  std::vector<int32_t> context = p.prefix;
  for (const auto& c : p.chunks) context.insert(context.end(), c.begin(), c.end());
  context.insert(context.end(), p.query.begin(), p.query.end());
  if (static_cast<int64_t>(context.size()) + o.continuation_tokens > m.config().max_seq_len) {
    return absl::OutOfRangeError(absl::StrCat("quality bench: prompt of ", context.size(), " + ",
                                              o.continuation_tokens,
                                              " tokens exceeds the context of ",
                                              m.config().max_seq_len));
  }
  ASSIGN_OR_RETURN(p.continuation,
                   Generate(m, context, o.continuation_tokens, o, {bos, eos}, &rng));
  RETURN_IF_ERROR(Precompute(m, o, &p, cost));
  return p;
}

}  // namespace

absl::StatusOr<PromptData> MakePrompt(const model::Model& m, const QualityBenchOptions& o,
                                      int index, const CorpusPrompts* corpus,
                                      std::map<int, NeighbourCost>* cost) {
  if (o.task == "xchunk") return MakeXchunk(m, o, index);
  if (o.task == "musique") return MakeMusique(m, o, corpus->prompts.at(index), index, cost);
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
  RETURN_IF_ERROR(Precompute(m, o, &p));
  return p;
}

absl::StatusOr<std::unique_ptr<CorpusPrompts>> LoadQualityCorpus(const QualityBenchOptions& o) {
  if (o.task != "musique") return nullptr;
  ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tk, model::LoadTokenizer(o.model_path));
  CorpusPromptOptions co;
  co.path = o.corpus;
  co.split = o.corpus_split;
  co.prompts = o.prompts;
  co.chunks = o.chunks;
  co.chunk_tokens = o.chunk_tokens_max;
  co.query_tokens = o.query_tokens;
  co.passages = o.passages;
  for (int k : o.neighbours) co.max_neighbours = std::max(co.max_neighbours, k);
  ASSIGN_OR_RETURN(CorpusPrompts cp, LoadCorpusPrompts(*tk, co));
  return std::make_unique<CorpusPrompts>(std::move(cp));
}

absl::StatusOr<BlendResult> BlendPrompt(const Blender& b, const PromptData& p,
                                        const std::vector<std::unique_ptr<ChunkKV>>& kvs,
                                        BlendOptions o, int64_t extra_capacity) {
  std::vector<std::unique_ptr<InMemoryKvSource>> src;
  for (const auto& kv : kvs) src.push_back(std::make_unique<InMemoryKvSource>(kv.get()));
  std::vector<BlendSegment> segs;
  segs.push_back({SegmentKind::kPrefix, p.prefix, src[0].get()});
  for (size_t c = 0; c < p.chunks.size(); ++c) {
    segs.push_back({SegmentKind::kChunk, p.chunks[c], src[c + 1].get()});
  }
  segs.push_back({SegmentKind::kQuery, p.query, nullptr});
  o.logits = QueryLogits::kAll;
  o.extra_capacity_tokens = extra_capacity;
  return b.Blend(segs, o);
}

absl::StatusOr<std::unique_ptr<model::Model>> LoadQualityModel(const QualityBenchOptions& o) {
  model::LoadOptions lo;
  lo.max_seq_len = o.max_seq_len;
  lo.kv_dtype = o.kv_dtype;
  return model::LoadModel(o.model_path, lo);
}

}  // namespace ragkv::blend
