#include "pipeline/neighbour_records.h"

#include <algorithm>
#include <utility>

#include "base/clock.h"
#include "base/status_macros.h"
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

// StoreOne: chunk `id`'s record after `near`, unless stored already.
template <typename Fail>
void StoreOne(const NeighbourPrecomputeOptions& o, int64_t id, const std::vector<int32_t>& tokens,
              const std::vector<int64_t>& near, NeighbourPrecomputeStats* st, const Fail& fail) {
  absl::StatusOr<std::optional<blend::NeighbourContext>> ctx =
      ContextOf(*o.retriever, o.tokenizer, near);
  if (!ctx.ok()) return fail(id, ctx.status());
  const kvstore::Fingerprint fp = o.model->fingerprint();
  if (!*ctx || (!o.replace && o.store->Contains(blend::NeighbourKeyOf(fp, **ctx, tokens)))) {
    ++st->skipped;
    return;
  }
  absl::StatusOr<uint64_t> bytes =
      blend::PrecomputeAndStoreWithNeighbours(*o.model, o.store, **ctx, tokens, o.codec);
  if (!bytes.ok()) return fail(id, bytes.status());
  ++st->computed;
  st->bytes += *bytes;
  st->context_tokens += (*ctx)->Tokens().size();
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
  const auto t0 = Clock::now();
  const kvstore::Fingerprint fp = o.model->fingerprint();
  // The chunks first (the scan holds a snapshot; the work is done outside it).
  // Every chunk gets its list; two chunks of the same tokens get the same
  // list, hence the same key, and the second is skipped as stored.
  std::vector<std::pair<int64_t, std::vector<int32_t>>> chunks;
  RETURN_IF_ERROR(o.retriever->ForEachChunk([&](const retrieval::ChunkRecord& c) {
    if (c.token_ids.empty()) return absl::OkStatus();
    const kvstore::ChunkKey plain = kvstore::ChunkKey::Of(fp, c.token_ids);
    if (plain.Lo64() % o.shard_count != o.shard_index) return absl::OkStatus();
    chunks.push_back({c.chunk_id, c.token_ids});
    return absl::OkStatus();
  }));
  NeighbourPrecomputeStats st;
  st.chunks = static_cast<int64_t>(chunks.size());
  auto fail = [&](int64_t id, const absl::Status& s) {
    ++st.failed;
    NeighbourFailure f{id, s.ToString()};
    if (o.on_failure) o.on_failure(f);
    if (static_cast<int>(st.failures.size()) < o.max_failures_listed) {
      st.failures.push_back(std::move(f));
    }
  };
  auto progress = [&] {
    st.seconds = SecondsSince(t0);
    if (o.on_progress) o.on_progress(st);
  };
  progress();
  for (size_t b = 0; b < chunks.size() && !st.cancelled; b += kBatch) {
    const size_t e = std::min(chunks.size(), b + kBatch);
    std::vector<int64_t> ids;
    for (size_t i = b; i < e; ++i) ids.push_back(chunks[i].first);
    ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> near,
                     o.retriever->NearestChunkIds(ids, o.neighbours));
    std::vector<std::pair<int64_t, std::vector<int64_t>>> lists;
    for (size_t i = 0; i < ids.size(); ++i) lists.push_back({ids[i], near[i]});
    RETURN_IF_ERROR(o.retriever->SetChunkNeighbours(o.neighbours, lists));
    for (size_t i = b; i < e; ++i) {
      if (o.cancelled && o.cancelled()) {
        st.cancelled = true;
        break;
      }
      StoreOne(o, chunks[i].first, chunks[i].second, near[i - b], &st, fail);
      progress();
    }
  }
  st.seconds = SecondsSince(t0);
  return st;
}

}  // namespace ragkv::pipeline
