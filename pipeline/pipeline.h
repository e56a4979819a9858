// pipeline.h: Pipeline, the one request pipeline of ragkv. It takes a
// prompt (segments or raw token ids) and options and does everything a
// served blend does:
//   1. resolution: catalogue chunks, documents and raw token matches to
//      tokens, their stored KV opened in the tiered store;
//   2. the exact-prefix cache: the longest stored chain of blocks covering
//      the prompt's leading rows served exactly (docs/blend.md);
//   3. the quality gate and the loading controller settle strategy, ratio
//      and selector;
//   4. the blend (blend::Blender), each finished layer handed to the sink;
//      a stored record that fails mid-blend is recomputed as a miss;
//   5. store-back: chunks computed fresh and the exact rows' prefix blocks
//      are stored off the request's path (pipeline/store_back.h).
// Protocol-free: the gRPC BlendService (Blend, RetrieveAndBlend), the TTFT
// benchmark and every other front end call Run; none re-implements a step
// (docs/architecture.md "The request pipeline").
//
// Ownership: the Options' pointers are not owned and must outlive the
// Pipeline; the Pipeline owns its StoreBack.
// Thread safety: Run and Retrieve are thread-safe (concurrent requests share
// only thread-safe objects: the Blender, the store, the pool, the
// controller, the metrics); Drain / the destructor must not race Run.
#ifndef RAGKV_PIPELINE_PIPELINE_H_
#define RAGKV_PIPELINE_PIPELINE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "blend/blender.h"
#include "pipeline/metric_sink.h"
#include "pipeline/request.h"
#include "pipeline/store_back.h"
#include "retrieval/retriever.h"

namespace ragkv::kvstore {
class TieredStore;
}
namespace ragkv::model {
class Model;
class KVCachePool;
class Tokenizer;
}  // namespace ragkv::model
namespace ragkv::blend {
class Blender;
class LoadingController;
struct GateDecision;
}  // namespace ragkv::blend

namespace ragkv::pipeline {
namespace internal {
class Budgets;
}

// PrefixCacheOptions: the exact-prefix cache (needs a store and store-back).
struct PrefixCacheOptions {
  bool enabled = true;        // --prefix-cache
  int block_tokens = 16;      // --prefix-block-tokens (vLLM's default block)
  int64_t max_tokens = 4096;  // --prefix-cache-max-tokens: longest prefix looked up / stored
};

class Pipeline {
 public:
  struct Options {
    const model::Model* model = nullptr;           // required
    const model::Tokenizer* tokenizer = nullptr;   // text segments, BOS
    const blend::Blender* blender = nullptr;       // required
    blend::LoadingController* controller = nullptr;  // Mode::kAuto (null: default ratio)
    kvstore::TieredStore* store = nullptr;         // null: everything computed fresh
    retrieval::Retriever* retriever = nullptr;     // chunk ids, raw prompts, Retrieve
    retrieval::SearchMode search_mode = retrieval::SearchMode::kHybrid;  // Retrieve's
    const blend::GateDecision* quality_gate = nullptr;  // null: no gate
    model::KVCachePool* cache_pool = nullptr;      // null: each fused cache fresh
    MetricSink* metrics = nullptr;                 // null: nothing counted
    // store_back: chunks computed fresh (and prefix blocks) are stored
    // after the request (needs `store`); its executor and codec.
    bool store_back = true;
    StoreBack::Options store_back_options;
    PrefixCacheOptions prefix_cache;  // used only with store-back
    double default_ratio = 0.15;      // kCacheBlend when ratio 0 and no gate ratio
    // neighbour_records: k > 0 looks a catalogue chunk up first as its
    // neighbour-aware record (computed after [BOS] + its k nearest chunks,
    // `ragkv precompute --neighbours k`; pipeline/neighbour_records.h), read
    // from its stored first position; absent, the plain record (counted in
    // RequestResult::neighbour_fallbacks). Needs the retriever. Default 0:
    // plain records only.
    int neighbour_records = 0;
    // first_position_records: the prompt's first chunk, right after the
    // prefix (BOS and the leading fresh text: a system prompt, a chat
    // template's head), is looked up first as its first-position record: its
    // KV computed right after exactly that prefix (a neighbour-aware record
    // with the prefix as its lead and no neighbour, keyed under the request's
    // fingerprint), so its rows are exact. Absent, the plain record is used
    // and store-back computes the first-position record for the next request
    // that puts this chunk first after the same prefix. docs/blend.md
    // "First-position records". Default off.
    bool first_position_records = false;
  };

  // Create: InvalidArgument without a model or blender; errors of the
  // store-back executor.
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(Options options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Run: one request: the prompt's fused KV delivered to `sink` layer by
  // layer. Errors: InvalidArgument (empty prompt or segment, a chunk last,
  // too many matches), OutOfRange (over the model's context), NotFound
  // (unknown chunk id, no chunk in a raw prompt), FailedPrecondition (a
  // backend the prompt needs is absent), the sink's errors, DataLoss (a
  // failed load after layers without accept_restart), the Blender's.
  absl::StatusOr<RequestResult> Run(const Prompt& prompt, const RequestOptions& options,
                                    LayerSink* sink) const;

  // Retrieved: a retrieval's prompt: [system prompt,] the k chunks, the query.
  struct Retrieved {
    Prompt prompt;
    std::vector<uint64_t> chunk_ids;
    double retrieve_ms = 0;
  };
  // Retrieve: retrieval of `query` (the server's search mode) as a prompt.
  // Errors: FailedPrecondition without a retriever, NotFound when nothing
  // is found, the retriever's.
  absl::StatusOr<Retrieved> Retrieve(const std::string& query, int k,
                                     const std::string& system_prompt) const;

  // DrainStoreBack: waits until the store-back work queued so far is done
  // (benchmarks and tests; a no-op without store-back).
  void DrainStoreBack() const;
  // StopStoreBack: drops queued store-back work (shutdown, before the store
  // closes). Idempotent.
  void StopStoreBack();

  const Options& options() const { return options_; }

 private:
  struct RunState;  // pipeline.cc
  explicit Pipeline(Options options);
  // The stages of Run, in order.
  absl::Status Prepare(const Prompt& prompt, RunState* run) const;
  absl::Status StartStream(RunState* run) const;
  // Cold: nothing of the prompt is stored (no piece's record, no exact prefix).
  bool Cold(const RunState& run) const;
  absl::StatusOr<blend::BlendResult> BlendWithRecovery(RunState* run) const;
  absl::StatusOr<blend::BlendResult> BlendOnce(RunState* run) const;
  absl::StatusOr<bool> RecoverFailedLoad(const absl::Status& st, RunState* run) const;
  absl::StatusOr<RequestResult> Finish(RunState* run, blend::BlendResult* r) const;
  // ScheduleFirstPosition: store-back of the first chunk's first-position
  // record when it was looked for and missed.
  void ScheduleFirstPosition(const RunState& run) const;
  void FillResult(const RunState& run, const blend::BlendResult& r, RequestResult* res) const;
  bool PrefixCacheOn() const;

  Options options_;
  std::unique_ptr<StoreBack> store_back_;  // null: off
  std::unique_ptr<internal::Budgets> budgets_;  // RequestOptions::adaptive_budget's
};

}  // namespace ragkv::pipeline

#endif  // RAGKV_PIPELINE_PIPELINE_H_
