// engine_workload.cc: see engine_workload.h.
#include "bench/engine/internal/engine_workload.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/kv_source.h"
#include "blend/xchunk_task.h"
#include "kvstore/chunk_key.h"

namespace ragkv::bench::engine_internal {
namespace {

namespace ti = services::ttft_internal;

// XchunkTexts: the xchunk task's prompts (blend/xchunk_task.h), the split
// by the seed's parity.
absl::StatusOr<Texts> XchunkTexts(const EngineBenchOptions& o, int vocab) {
  if (vocab != blend::kXchunkVocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bench engine: --task xchunk needs a checkpoint of the xchunk vocabulary (%d tokens; "
        "docs/xchunk.md), the model has %d",
        blend::kXchunkVocab, vocab));
  }
  Texts t;
  for (int i = 0; i < o.prompts; ++i) {
    ASSIGN_OR_RETURN(blend::XchunkPrompt x, blend::MakeXchunkPrompt(o.seed, i, o.pairs, o.chunks));
    t.documents.push_back(std::move(x.chunks));
    t.queries.push_back(std::move(x.query));
    t.answers.push_back(x.answer);
  }
  t.documents_bos = blend::kXchunkBos;
  t.split = blend::XchunkSeedIsDev(o.seed) ? "dev" : "test";
  t.description = absl::StrFormat("xchunk: %d prompts of seed %d (%s) x (%d pairs in %d passages, "
                                  "sent as documents, + \"? k\")",
                                  o.prompts, o.seed, t.split, o.pairs, o.chunks);
  return t;
}

// PrepareDocuments: xchunk prompts, or corpus passages cut to chunk_tokens:
// each passage's KV precomputed alone and stored under its content key (what
// a `documents` request looks up).
absl::StatusOr<std::vector<EnginePrompt>> PrepareDocuments(const Texts& t,
                                                           const model::Model& model, int32_t bos,
                                                           services::GrpcTtftPath* path,
                                                           std::ostream& progress) {
  if (t.documents_bos >= 0) bos = t.documents_bos;
  std::vector<EnginePrompt> out;
  for (size_t i = 0; i < t.documents.size(); ++i) {
    EnginePrompt p;
    p.bos = bos >= 0;
    if (p.bos) p.tokens.push_back(bos);
    for (const std::vector<int32_t>& d : t.documents[i]) {
      ASSIGN_OR_RETURN(blend::ChunkKV kv, blend::PrecomputeChunk(model, d));
      services::CatalogueChunk c;
      c.tokens = d;
      c.kv_key = std::string(kvstore::ChunkKey::Of(model.fingerprint(), d).AsBytes());
      RETURN_IF_ERROR(path->Put(c, kv));
      p.tokens.insert(p.tokens.end(), d.begin(), d.end());
    }
    p.documents = t.documents[i];
    p.query = static_cast<int>(t.queries[i].size());
    p.tokens.insert(p.tokens.end(), t.queries[i].begin(), t.queries[i].end());
    p.answer = i < t.answers.size() ? t.answers[i] : -1;
    progress << absl::StrFormat("bench engine: prompt %d: %d documents, %d tokens, KV stored\n", i,
                                p.documents.size(), p.tokens.size());
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

absl::StatusOr<Texts> BuildTexts(const EngineBenchOptions& o, const std::string& path, int vocab) {
  if (o.task == "xchunk") return XchunkTexts(o, vocab);
  Texts t;
  if (o.passages != "chunker" && o.passages != "cut") {
    return absl::InvalidArgumentError("bench engine: --passages must be chunker or cut, got " +
                                      o.passages);
  }
  if (!o.corpus.empty()) {
    const bool cut = o.passages == "cut";
    services::TtftBenchOptions to;
    to.model_spec = path;
    to.corpus = o.corpus;
    to.split = o.split;
    to.prompts = o.prompts;
    to.chunks = o.chunks;
    to.chunk_tokens = o.chunk_tokens;
    to.query_tokens = o.query_tokens;
    ti::TokenRng rng(o.seed, vocab);
    ASSIGN_OR_RETURN(ti::Workload w, ti::BuildWorkload(to, vocab, /*with_grpc=*/true, rng));
    for (const ti::Prompt& p : w.prompts) {
      if (cut) {
        t.documents.push_back(p.chunks);
      } else {
        t.chunks.push_back(p.texts);
      }
      t.queries.push_back(p.query);
    }
    t.description = w.description;
    if (cut) t.description += " (passages cut, sent as documents)";
    t.split = w.split;
    t.split_questions = w.split_questions;
    t.file_questions = w.file_questions;
    return t;
  }
  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
  for (int i = 0; i < o.prompts; ++i) {
    std::vector<std::string> texts;
    for (int c = 0; c < o.chunks; ++c) {
      // Long enough that the chunker's first chunk has chunk_tokens tokens.
      texts.push_back(services::SyntheticChunkText(o.chunk_tokens * 8,
                                                   o.seed * 1000003 + i * 1024 + c));
    }
    std::vector<int32_t> q(o.query_tokens);
    for (int32_t& x : q) x = tok(rng);
    t.chunks.push_back(std::move(texts));
    t.queries.push_back(std::move(q));
  }
  t.description = absl::StrFormat("synthetic: %d prompts x (%d random-word chunks of <= %d tokens "
                                  "+ %d query ids)",
                                  o.prompts, o.chunks, o.chunk_tokens, o.query_tokens);
  return t;
}

// Prepare: every chunk ingested into the sidecar (first chunk of each
// text), its KV precomputed by ragkv and stored with PutChunk; the prompts.
absl::StatusOr<std::vector<EnginePrompt>> Prepare(const Texts& t, const model::Model& model,
                                                  int32_t bos, services::GrpcTtftPath* path,
                                                  std::ostream& progress) {
  if (!t.documents.empty()) return PrepareDocuments(t, model, bos, path, progress);
  std::vector<EnginePrompt> out;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<services::CatalogueChunk> cat,
                     path->Ingest(t.chunks[i], absl::StrCat("p", i, "_"), /*first_chunk_only=*/true));
    EnginePrompt p;
    p.bos = bos >= 0;
    if (p.bos) p.tokens.push_back(bos);
    for (const services::CatalogueChunk& c : cat) {
      ASSIGN_OR_RETURN(blend::ChunkKV kv, blend::PrecomputeChunk(model, c.tokens));
      RETURN_IF_ERROR(path->Put(c, kv));
      p.chunk_ids.push_back(c.chunk_id);
      p.tokens.insert(p.tokens.end(), c.tokens.begin(), c.tokens.end());
    }
    p.query = static_cast<int>(t.queries[i].size());
    p.tokens.insert(p.tokens.end(), t.queries[i].begin(), t.queries[i].end());
    progress << absl::StrFormat("bench engine: prompt %d: %d chunks, %d tokens, KV stored\n", i,
                                cat.size(), p.tokens.size());
    out.push_back(std::move(p));
  }
  return out;
}


}  // namespace ragkv::bench::engine_internal
