// engine_workload.h: the prompts of `ragkv bench engine` (bench_engine.h):
// a MuSiQue-style corpus, synthetic shapes, or the xchunk task; their chunks
// ingested into the sidecar (or, for xchunk, stored as documents) with KV
// precomputed by ragkv. Internal to bench/engine.
#ifndef RAGKV_BENCH_ENGINE_INTERNAL_ENGINE_WORKLOAD_H_
#define RAGKV_BENCH_ENGINE_INTERNAL_ENGINE_WORKLOAD_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/engine/bench_engine.h"
#include "bench/services/bench_ttft_grpc.h"
#include "model/model.h"

namespace ragkv::bench::engine_internal {

// EnginePrompt: one request: the chunks by catalogue id, the prompt llama.cpp
// holds ([BOS] chunks query) and the query length.
struct EnginePrompt {
  std::vector<uint64_t> chunk_ids;
  std::vector<std::vector<int32_t>> documents;  // xchunk: passages sent as documents
  int32_t answer = -1;                          // xchunk: the expected token
  std::vector<int32_t> tokens;
  int query = 0;
  bool bos = false;
};

// Texts: per prompt, its chunk texts and query ids (corpus questions, or
// random-word documents and random ids).
struct Texts {
  std::vector<std::vector<std::string>> chunks;
  // xchunk, or a corpus with passages "cut": token passages sent as documents
  std::vector<std::vector<std::vector<int32_t>>> documents;
  std::vector<int32_t> answers;                              // xchunk
  int32_t documents_bos = -1;  // xchunk: its BOS; -1: the tokenizer's (Prepare's `bos`)
  std::vector<std::vector<int32_t>> queries;
  std::string description;
  std::string split;  // corpus mode: as services::ttft_internal::Workload; xchunk: by seed
  int split_questions = 0, file_questions = 0;
};

// BuildTexts: the workload's texts for `o` (`path`: the GGUF, `vocab` its
// vocabulary size). Errors: a bad corpus, or an xchunk task on a model of
// another vocabulary.
absl::StatusOr<Texts> BuildTexts(const EngineBenchOptions& o, const std::string& path, int vocab);

// Prepare: the prompts of `t`, their chunks' KV precomputed by `model` and
// stored in the sidecar behind `path` (progress lines to `progress`).
absl::StatusOr<std::vector<EnginePrompt>> Prepare(const Texts& t, const model::Model& model,
                                                  int32_t bos, services::GrpcTtftPath* path,
                                                  std::ostream& progress);

}  // namespace ragkv::bench::engine_internal

#endif  // RAGKV_BENCH_ENGINE_INTERNAL_ENGINE_WORKLOAD_H_
