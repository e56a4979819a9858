#include "pipeline/neighbour_records.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "retrieval/retriever.h"

namespace ragkv::pipeline {

absl::StatusOr<std::optional<blend::NeighbourContext>> NeighbourContextOf(
    const retrieval::Retriever& retriever, const model::Tokenizer* tokenizer, int64_t chunk_id,
    int k) {
  ASSIGN_OR_RETURN(std::vector<retrieval::SearchResult> near,
                   retriever.NearestChunks(chunk_id, k));
  if (near.empty()) return std::nullopt;
  blend::NeighbourContext ctx;
  if (tokenizer != nullptr && tokenizer->add_bos()) ctx.lead = {tokenizer->bos_id()};
  for (auto it = near.rbegin(); it != near.rend(); ++it) {
    ctx.neighbours.push_back(std::move(it->token_ids));  // the nearest last
  }
  return ctx;
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
  std::vector<std::pair<int64_t, std::vector<int32_t>>> chunks;
  std::set<kvstore::ChunkKey> seen;
  RETURN_IF_ERROR(o.retriever->ForEachChunk([&](const retrieval::ChunkRecord& c) {
    if (c.token_ids.empty()) return absl::OkStatus();
    const kvstore::ChunkKey plain = kvstore::ChunkKey::Of(fp, c.token_ids);
    if (plain.Lo64() % o.shard_count != o.shard_index) return absl::OkStatus();
    if (seen.insert(plain).second) chunks.push_back({c.chunk_id, c.token_ids});
    return absl::OkStatus();
  }));
  NeighbourPrecomputeStats st;
  st.chunks = static_cast<int64_t>(chunks.size());
  auto fail = [&](int64_t id, const absl::Status& s) {
    ++st.failed;
    if (static_cast<int>(st.failures.size()) < o.max_failures_listed) {
      st.failures.push_back(absl::StrCat("chunk ", id, ": ", s.ToString()));
    }
  };
  for (const auto& [id, tokens] : chunks) {
    absl::StatusOr<std::optional<blend::NeighbourContext>> ctx =
        NeighbourContextOf(*o.retriever, o.tokenizer, id, o.neighbours);
    if (!ctx.ok()) {
      fail(id, ctx.status());
      continue;
    }
    if (!*ctx || (!o.replace && o.store->Contains(blend::NeighbourKeyOf(fp, **ctx, tokens)))) {
      ++st.skipped;
      continue;
    }
    absl::StatusOr<uint64_t> bytes =
        blend::PrecomputeAndStoreWithNeighbours(*o.model, o.store, **ctx, tokens, o.codec);
    if (!bytes.ok()) {
      fail(id, bytes.status());
      continue;
    }
    ++st.computed;
    st.bytes += *bytes;
    st.context_tokens += (*ctx)->Tokens().size();
  }
  st.seconds = SecondsSince(t0);
  return st;
}

}  // namespace ragkv::pipeline
