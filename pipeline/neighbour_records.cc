#include "pipeline/neighbour_records.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "base/sync.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "retrieval/retriever.h"

namespace ragkv::pipeline {

namespace {

// ContextOf: lead + the chunks `ids`' tokens, the nearest (ids[0]) last;
// nullopt when `ids` is empty or one of them is gone.
absl::StatusOr<std::optional<blend::NeighbourContext>> ContextOf(
    const retrieval::Retriever& retriever, const model::Tokenizer* tokenizer,
    const std::vector<int64_t>& ids) {
  if (ids.empty()) return std::nullopt;
  blend::NeighbourContext ctx;
  if (tokenizer != nullptr && tokenizer->add_bos()) ctx.lead = {tokenizer->bos_id()};
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    ASSIGN_OR_RETURN(std::optional<retrieval::ChunkRecord> c, retriever.GetChunk(*it));
    if (!c) return std::nullopt;
    ctx.neighbours.push_back(std::move(c->token_ids));
  }
  return ctx;
}

constexpr size_t kBatch = 256;  // chunks per batched neighbour search

// Outcome: what became of one chunk's record.
struct Outcome {
  enum Kind { kComputed, kSkipped, kFailed } kind = kSkipped;
  absl::Status status;  // kFailed
  uint64_t bytes = 0, context_tokens = 0, chunk_tokens = 0;
};

// StoreOne: chunk `tokens`' record after `near`, unless stored already.
Outcome StoreOne(const NeighbourPrecomputeOptions& o, const std::vector<int32_t>& tokens,
                 const std::vector<int64_t>& near) {
  absl::StatusOr<std::optional<blend::NeighbourContext>> ctx =
      ContextOf(*o.retriever, o.tokenizer, near);
  if (!ctx.ok()) return {Outcome::kFailed, ctx.status()};
  const kvstore::Fingerprint fp = o.model->fingerprint();
  if (!*ctx || (!o.replace && o.store->Contains(blend::NeighbourKeyOf(fp, **ctx, tokens)))) {
    return {Outcome::kSkipped};
  }
  absl::StatusOr<uint64_t> bytes =
      blend::PrecomputeAndStoreWithNeighbours(*o.model, o.store, **ctx, tokens, o.codec);
  if (!bytes.ok()) return {Outcome::kFailed, bytes.status()};
  return {Outcome::kComputed, absl::OkStatus(), *bytes, (*ctx)->Tokens().size(), tokens.size()};
}

// Tally: the pass's stats, counted by the workers under one lock; every
// callback runs under it (serialized, in the order counted).
class Tally {
 public:
  Tally(const NeighbourPrecomputeOptions& o, int64_t chunks) : o_(o), t0_(Clock::now()) {
    st_.chunks = chunks;
    Report();
  }
  void Count(int64_t id, Outcome out) {
    MutexLock lock(&mu_);
    if (out.kind == Outcome::kSkipped) ++st_.skipped;
    if (out.kind == Outcome::kComputed) {
      ++st_.computed;
      st_.bytes += out.bytes;
      st_.context_tokens += out.context_tokens;
      st_.chunk_tokens += out.chunk_tokens;
    }
    if (out.kind == Outcome::kFailed) Fail(id, out.status);
    Report();
  }
  // Cancelled: polls options.cancelled once, remembering a true.
  bool Cancelled() {
    MutexLock lock(&mu_);
    if (!st_.cancelled && o_.cancelled && o_.cancelled()) st_.cancelled = true;
    return st_.cancelled;
  }
  // Stopped: whether a poll has seen the cancel (no new poll).
  bool Stopped() {
    MutexLock lock(&mu_);
    return st_.cancelled;
  }
  NeighbourPrecomputeStats Done() {
    MutexLock lock(&mu_);
    st_.seconds = SecondsSince(t0_);
    return st_;
  }

 private:
  void Fail(int64_t id, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++st_.failed;
    NeighbourFailure f{id, s.ToString()};
    if (o_.on_failure) o_.on_failure(f);
    if (static_cast<int>(st_.failures.size()) < o_.max_failures_listed) {
      st_.failures.push_back(std::move(f));
    }
  }
  void Report() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    st_.seconds = SecondsSince(t0_);
    if (o_.on_progress) o_.on_progress(st_);
  }

  const NeighbourPrecomputeOptions& o_;
  const Clock::time_point t0_;
  Mutex mu_;  // base/sync.h: TSan sees it (docs/reliability.md)
  NeighbourPrecomputeStats st_ ABSL_GUARDED_BY(mu_);
};

using ChunkList = std::vector<std::pair<int64_t, std::vector<int32_t>>>;

// StoreBatch: chunks [b, e) after their lists `near`, `workers` threads
// pulling from one cursor, each stopping once the pass is cancelled.
void StoreBatch(const NeighbourPrecomputeOptions& o, const ChunkList& chunks, size_t b, size_t e,
                const std::vector<std::vector<int64_t>>& near, Tally* tally) {
  std::atomic<size_t> next{b};
  auto work = [&] {
    for (size_t i; !tally->Cancelled() && (i = next.fetch_add(1)) < e;) {
      tally->Count(chunks[i].first, StoreOne(o, chunks[i].second, near[i - b]));
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < o.workers && static_cast<size_t>(w) < e - b; ++w) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

// ListShardChunks: the catalogue's non-empty chunks of this shard. The
// scan holds a snapshot; the work is done outside it. Every chunk gets its
// list; two chunks of the same tokens get the same list, hence the same
// key, and the second is skipped as stored.
absl::StatusOr<ChunkList> ListShardChunks(const NeighbourPrecomputeOptions& o) {
  const kvstore::Fingerprint fp = o.model->fingerprint();
  ChunkList chunks;
  RETURN_IF_ERROR(o.retriever->ForEachChunk([&](const retrieval::ChunkRecord& c) {
    if (c.token_ids.empty()) return absl::OkStatus();
    const kvstore::ChunkKey plain = kvstore::ChunkKey::Of(fp, c.token_ids);
    if (plain.Lo64() % o.shard_count != o.shard_index) return absl::OkStatus();
    chunks.push_back({c.chunk_id, c.token_ids});
    return absl::OkStatus();
  }));
  return chunks;
}

// RunBatch: chunks [b, e): their k nearest in one batched search, recorded
// in the catalogue, then their records stored (StoreBatch).
absl::Status RunBatch(const NeighbourPrecomputeOptions& o, const ChunkList& chunks, size_t b,
                      size_t e, Tally* tally) {
  std::vector<int64_t> ids;
  for (size_t i = b; i < e; ++i) ids.push_back(chunks[i].first);
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> near,
                   o.retriever->NearestChunkIds(ids, o.neighbours));
  std::vector<std::pair<int64_t, std::vector<int64_t>>> lists;
  for (size_t i = 0; i < ids.size(); ++i) lists.push_back({ids[i], near[i]});
  RETURN_IF_ERROR(o.retriever->SetChunkNeighbours(o.neighbours, lists));
  StoreBatch(o, chunks, b, e, near, tally);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<blend::NeighbourContext>> NeighbourContextOf(
    const retrieval::Retriever& retriever, const model::Tokenizer* tokenizer, int64_t chunk_id,
    int k) {
  ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> ids, retriever.ChunkNeighbours(chunk_id, k));
  if (!ids) return std::nullopt;
  return ContextOf(retriever, tokenizer, *ids);
}

absl::StatusOr<NeighbourPrecomputeStats> PrecomputeNeighbourRecords(
    const NeighbourPrecomputeOptions& o) {
  if (o.model == nullptr || o.retriever == nullptr || o.store == nullptr) {
    return absl::InvalidArgumentError("neighbour precompute: model, retriever and store required");
  }
  if (o.neighbours < 1 || o.shard_count == 0 || o.shard_index >= o.shard_count) {
    return absl::InvalidArgumentError("neighbour precompute: k >= 1 and shard i/n with i < n");
  }
  ASSIGN_OR_RETURN(ChunkList chunks, ListShardChunks(o));
  Tally tally(o, static_cast<int64_t>(chunks.size()));
  for (size_t b = 0; b < chunks.size() && !tally.Stopped(); b += kBatch) {
    RETURN_IF_ERROR(RunBatch(o, chunks, b, std::min(chunks.size(), b + kBatch), &tally));
  }
  return tally.Done();
}

}  // namespace ragkv::pipeline
