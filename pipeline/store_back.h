// store_back.h: StoreBack (pipeline step 5, pipeline/pipeline.h) writes the KV of chunks that a
// blend had to compute fresh (their record missed in the store) back to the store after the
// response, so the next request hits (issue 20, "fresh KV is stored back"; LMCache #2029). The
// record is the one precompute writes (blend::PrecomputeAndStore: the chunk alone at positions 0..,
// the server's --kv-codec, under its content key), so serving and precompute agree and a duplicate
// write is harmless. Off the request path and best effort, on its own small executor (so it never
// delays or sheds requests): one task per chunk, skipped when the chunk is queued already, found in
// the store when its task runs, or when the queue is full; counted in
// /metrics (ragkv_kv_stored_back_{chunks,bytes}_total,
// ragkv_kv_stored_back_in_context_total for first-position records,
// ragkv_kv_store_back_skipped_total, ragkv_kv_store_back_errors_total).
// Thread safety: Schedule, ScheduleInContext and SchedulePut are thread-safe; Stop / the destructor
// drop the queued work and wait for the task running.
#ifndef RAGKV_PIPELINE_STORE_BACK_H_
#define RAGKV_PIPELINE_STORE_BACK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "base/executor.h"
#include "base/sync.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "kvstore/kv_chunk.h"
#include "pipeline/metric_sink.h"

namespace ragkv::model {
class Model;
}
namespace ragkv::kvstore {
class TieredStore;
}

namespace ragkv::pipeline {

class StoreBack {
 public:
  struct Options {
    int threads = 1;
    size_t max_queue = 64;  // chunks waiting; more are skipped
    kvstore::Codec codec = kvstore::Codec::kRaw;  // the records' codec (--kv-codec)
  };
  // Create: `model`, `store` and `metrics` are not owned and must outlive
  // the StoreBack. Errors: those of BoundedExecutor::Create.
  static absl::StatusOr<std::unique_ptr<StoreBack>> Create(const model::Model* model,
                                                           kvstore::TieredStore* store,
                                                           MetricSink* metrics, Options options);
  ~StoreBack();  // Stop()
  StoreBack(const StoreBack&) = delete;
  StoreBack& operator=(const StoreBack&) = delete;

  // Schedule: stores the KV of the chunk `tokens` (its whole token list)
  // under `key` (its content key under the model's or a salted
  // fingerprint) unless it is queued already. Never blocks on the store.
  void Schedule(const kvstore::ChunkKey& key, std::vector<int32_t> tokens);
  // ScheduleInContext: stores the record of the chunk `tokens` computed
  // right after `context` (blend::PrecomputeAndStoreWithNeighbours, keyed by
  // blend::NeighbourKeyOf under `fp`) unless it is queued already: a
  // first-position record (pipeline.h Options::first_position_records).
  void ScheduleInContext(const kvstore::Fingerprint& fp, blend::NeighbourContext context,
                         std::vector<int32_t> tokens);
  // SchedulePut: stores `records` (prefix blocks: pipeline/internal/
  // prefix_cache.h) the store does not hold yet, in one task; skipped
  // (counted) when the queue is full. Never blocks on the store.
  void SchedulePut(std::vector<blend::StoreChunk> records);
  // codec: the codec of the records this StoreBack writes.
  kvstore::Codec codec() const { return codec_; }
  // Drain: waits until no task is queued or running (tests).
  void Drain();
  // Stop: queued tasks are dropped; waits for the running one. Idempotent.
  void Stop();

 private:
  StoreBack(const model::Model* model, kvstore::TieredStore* store, MetricSink* metrics,
            kvstore::Codec codec)
      : model_(model), store_(store), metrics_(metrics), codec_(codec) {}
  // Submit: `put` on the executor unless `key` is in flight; Run: it, when
  // the store does not hold `key` yet, counted in `counter`.
  void Submit(const kvstore::ChunkKey& key, std::function<absl::StatusOr<uint64_t>()> put,
              const char* counter);
  void Run(const kvstore::ChunkKey& key, const std::function<absl::StatusOr<uint64_t>()>& put,
           const char* counter);

  const model::Model* model_;
  kvstore::TieredStore* store_;
  MetricSink* metrics_;
  const kvstore::Codec codec_;
  std::unique_ptr<BoundedExecutor> executor_;
  std::atomic<bool> stopping_{false};
  Mutex mu_;
  absl::flat_hash_set<kvstore::ChunkKey> in_flight_ ABSL_GUARDED_BY(mu_);
  int puts_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ragkv::pipeline

#endif  // RAGKV_PIPELINE_STORE_BACK_H_
