// retriever_neighbours.cc: the neighbour lists of neighbour-aware records
// (retriever.h: NearestChunks, NearestChunkIds, SetChunkNeighbours,
// ChunkNeighbours; docs/retrieval.md "Neighbour-aware records").
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "retrieval/retriever.h"

namespace ragkv::retrieval {
namespace {

constexpr int kSpare = 4;  // extra hits searched: the chunk itself and copies of it

std::string NeighbourMetaKey(int k, int64_t chunk_id) {
  return absl::StrFormat("neighbours/v1/%d/%016x", k, static_cast<uint64_t>(chunk_id));
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int64_t>>> Retriever::NearestChunkIds(
    absl::Span<const int64_t> chunk_ids, int k) const {
  if (k < 1 || k > VectorIndex::kMaxK - kSpare - 1) {
    return absl::InvalidArgumentError(absl::StrCat("NearestChunks: k must be in [1, ",
                                                   VectorIndex::kMaxK - kSpare - 1, "], got ", k));
  }
  const int dim = options_.index.dim;
  std::vector<float> queries;
  std::vector<size_t> row_of;  // query row -> position in chunk_ids
  std::vector<std::vector<int32_t>> self_tokens(chunk_ids.size());
  for (size_t i = 0; i < chunk_ids.size(); ++i) {
    ASSIGN_OR_RETURN(std::optional<ChunkRecord> c, catalogue_->GetChunk(chunk_ids[i]));
    ASSIGN_OR_RETURN(std::optional<std::vector<float>> v, catalogue_->GetVector(chunk_ids[i]));
    if (!c || !v || static_cast<int>(v->size()) != dim) continue;
    self_tokens[i] = std::move(c->token_ids);
    queries.insert(queries.end(), v->begin(), v->end());
    row_of.push_back(i);
  }
  std::vector<std::vector<int64_t>> out(chunk_ids.size());
  if (row_of.empty()) return out;
  std::vector<std::vector<SearchHit>> hits;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!index_->is_trained()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "NearestChunks: vector index '", options_.index.factory, "' is not trained yet"));
    }
    ASSIGN_OR_RETURN(hits, index_->Search(queries, k + kSpare + 1));
  }
  for (size_t r = 0; r < row_of.size(); ++r) {
    const size_t i = row_of[r];
    std::vector<std::vector<int32_t>> taken = {self_tokens[i]};
    for (const SearchHit& h : hits[r]) {
      if (static_cast<int>(out[i].size()) == k) break;
      if (h.id == chunk_ids[i]) continue;
      ASSIGN_OR_RETURN(std::optional<ChunkRecord> c, catalogue_->GetChunk(h.id));
      if (!c) continue;  // removed meanwhile
      if (std::find(taken.begin(), taken.end(), c->token_ids) != taken.end()) continue;
      taken.push_back(std::move(c->token_ids));
      out[i].push_back(h.id);
    }
  }
  return out;
}

absl::StatusOr<std::vector<SearchResult>> Retriever::NearestChunks(int64_t chunk_id,
                                                                   int k) const {
  ASSIGN_OR_RETURN(std::optional<ChunkRecord> self, catalogue_->GetChunk(chunk_id));
  if (!self) return absl::NotFoundError(absl::StrCat("NearestChunks: no chunk ", chunk_id));
  ASSIGN_OR_RETURN(std::optional<std::vector<float>> vec, catalogue_->GetVector(chunk_id));
  if (!vec) return absl::NotFoundError(absl::StrCat("NearestChunks: chunk ", chunk_id, " has no vector"));
  const int64_t one[] = {chunk_id};
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> ids, NearestChunkIds(one, k));
  std::vector<SearchResult> out;
  for (int64_t id : ids[0]) {
    ASSIGN_OR_RETURN(std::optional<ChunkRecord> c, catalogue_->GetChunk(id));
    if (!c) continue;
    SearchResult& r = out.emplace_back();
    r.chunk_id = id;
    r.doc_id = c->doc_id;
    r.ordinal = c->ordinal;
    r.token_ids = std::move(c->token_ids);
  }
  return out;
}

absl::Status Retriever::SetChunkNeighbours(
    int k, const std::vector<std::pair<int64_t, std::vector<int64_t>>>& lists) {
  CatalogueMutation m;
  for (const auto& [id, near] : lists) {
    m.put_meta.emplace_back(NeighbourMetaKey(k, id), absl::StrJoin(near, ","));
  }
  return catalogue_->Apply(m);
}

absl::StatusOr<std::optional<std::vector<int64_t>>> Retriever::ChunkNeighbours(int64_t chunk_id,
                                                                               int k) const {
  ASSIGN_OR_RETURN(std::optional<std::string> v, catalogue_->GetMeta(NeighbourMetaKey(k, chunk_id)));
  if (!v) return std::nullopt;
  std::vector<int64_t> ids;
  for (absl::string_view part : absl::StrSplit(*v, ',', absl::SkipEmpty())) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::DataLossError(absl::StrCat("catalogue: bad neighbour list of chunk ", chunk_id));
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace ragkv::retrieval
