#include "pipeline/store_back.h"

#include <functional>
#include <utility>

#include "base/log.h"
#include "base/status_macros.h"
#include "blend/store_source.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"

namespace ragkv::pipeline {

absl::StatusOr<std::unique_ptr<StoreBack>> StoreBack::Create(const model::Model* model,
                                                              kvstore::TieredStore* store,
                                                              MetricSink* metrics, Options options) {
  std::unique_ptr<StoreBack> sb(new StoreBack(model, store, metrics, options.codec));
  ASSIGN_OR_RETURN(sb->executor_, BoundedExecutor::Create({options.threads, options.max_queue}));
  return sb;
}

StoreBack::~StoreBack() { Stop(); }

void StoreBack::Schedule(const kvstore::ChunkKey& key, std::vector<int32_t> tokens) {
  if (tokens.empty()) return;
  Submit(
      key,
      [this, key, t = std::move(tokens)] {
        return blend::PrecomputeAndStore(*model_, store_, t, codec_, &key);
      },
      "ragkv_kv_stored_back_chunks_total");
}

void StoreBack::ScheduleInContext(const kvstore::Fingerprint& fp, blend::NeighbourContext context,
                                  std::vector<int32_t> tokens) {
  if (tokens.empty() || (context.lead.empty() && context.neighbours.empty())) return;
  const kvstore::ChunkKey key = blend::NeighbourKeyOf(fp, context, tokens);
  Submit(
      key,
      [this, fp, c = std::move(context), t = std::move(tokens)] {
        return blend::PrecomputeAndStoreWithNeighbours(*model_, store_, c, t, codec_, &fp);
      },
      "ragkv_kv_stored_back_in_context_total");
}

void StoreBack::Submit(const kvstore::ChunkKey& key, std::function<absl::StatusOr<uint64_t>()> put,
                       const char* counter) {
  if (stopping_.load()) return;
  {
    MutexLock lock(&mu_);
    if (!in_flight_.insert(key).second) return;
  }
  absl::Status s = executor_->TrySubmit(
      [this, key, p = std::move(put), counter, rid = CurrentRequestId()]() mutable {
        ScopedRequestId scoped(rid);  // the request whose miss this is
        Run(key, p, counter);
      });
  if (!s.ok()) {  // queue full or stopping: the next miss tries again
    metrics_->Add("ragkv_kv_store_back_skipped_total", "");
    MutexLock lock(&mu_);
    in_flight_.erase(key);
  }
}

void StoreBack::Run(const kvstore::ChunkKey& key,
                    const std::function<absl::StatusOr<uint64_t>()>& put, const char* counter) {
  // Nothing to do when stopping, or when the record was stored meanwhile
  // (precompute, an earlier miss): the lookup runs here, off the request.
  if (!stopping_.load() && !store_->Contains(key)) {
    absl::StatusOr<uint64_t> bytes = put();
    if (bytes.ok()) {
      metrics_->Add(counter, "");
      metrics_->Add("ragkv_kv_stored_back_bytes_total", "", static_cast<double>(*bytes));
    } else {
      metrics_->Add("ragkv_kv_store_back_errors_total", "");
      RAGKV_LOG(WARNING) << "store-back of record " << key.ToHex() << ": " << bytes.status();
    }
  }
  MutexLock lock(&mu_);
  in_flight_.erase(key);
}

void StoreBack::SchedulePut(std::vector<blend::StoreChunk> records) {
  if (records.empty() || stopping_.load()) return;
  {
    MutexLock lock(&mu_);
    ++puts_in_flight_;
  }
  absl::Status s = executor_->TrySubmit(
      [this, r = std::move(records), rid = CurrentRequestId()]() mutable {
        ScopedRequestId scoped(rid);
        for (const blend::StoreChunk& c : r) {
          if (stopping_.load()) break;
          if (store_->Contains(c.key)) continue;
          if (absl::Status put = store_->Put(c.key, c.chunk); put.ok()) {
            metrics_->Add("ragkv_prefix_blocks_stored_total", "");
            metrics_->Add("ragkv_kv_stored_back_bytes_total", "",
                          static_cast<double>(c.chunk->TotalBytes()));
          } else {
            metrics_->Add("ragkv_kv_store_back_errors_total", "");
            RAGKV_LOG(WARNING) << "prefix block " << c.key.ToHex() << ": " << put;
          }
        }
        MutexLock lock(&mu_);
        --puts_in_flight_;
      });
  if (!s.ok()) {
    metrics_->Add("ragkv_kv_store_back_skipped_total", "");
    MutexLock lock(&mu_);
    --puts_in_flight_;
  }
}

void StoreBack::Stop() {
  stopping_.store(true);
  executor_->Shutdown();  // the queued tasks see stopping_ and return at once
}

void StoreBack::Drain() {
  MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_.empty() && puts_in_flight_ == 0;
  };
  mu_.Await(idle);
}

}  // namespace ragkv::pipeline
