#include "pipeline/internal/prefix_cache.h"

#include <algorithm>
#include <utility>

#include "base/log.h"
#include "base/status_macros.h"
#include "pipeline/store_back.h"

namespace ragkv::pipeline::internal {
namespace {

absl::Status ApplyExactPrefix(kvstore::TieredStore* store, const kvstore::Fingerprint& fp,
                              const PrefixCacheOptions& options, std::vector<Piece>* pieces,
                              BlendLayout* layout) {
  layout->exact.reset();
  layout->exact_tokens.clear();
  if (!options.enabled || layout->exact_failed || store == nullptr) return absl::OkStatus();
  const std::vector<int32_t> tokens = layout->Tokens(*pieces);
  const int64_t query_begin =
      static_cast<int64_t>(tokens.size()) - static_cast<int64_t>(pieces->back().tokens.size());
  // At least one context row stays outside the prefix: the Blender needs a
  // chunk segment between the prefix and the query (a repeated prompt whose
  // context is whole blocks would otherwise leave none and be refused).
  const int64_t limit = std::min(query_begin - 1, options.max_tokens);
  const std::vector<kvstore::ChunkKey> keys = kvstore::PrefixBlockKeys(
      layout->traffic, absl::MakeConstSpan(tokens).subspan(0, limit), options.block_tokens);
  if (keys.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(layout->exact, blend::PrefixKvSource::Open(store, keys, fp,
                                                              options.block_tokens));
  if (layout->exact == nullptr) return absl::OkStatus();
  const int64_t P = layout->exact->info().num_tokens;
  const blend::BlendSegment& first = layout->segs.front();
  if (first.kv != nullptr && first.kv->info().first_position == 0 &&
      P < static_cast<int64_t>(first.tokens.size())) {
    layout->exact.reset();  // the first segment is exact already, and longer
    return absl::OkStatus();
  }
  layout->exact_tokens.assign(tokens.begin(), tokens.begin() + P);
  std::vector<blend::BlendSegment> segs = {{blend::SegmentKind::kPrefix,
                                            absl::MakeConstSpan(layout->exact_tokens),
                                            layout->exact.get()}};
  std::vector<int> owners = {kExactSegment};
  int64_t off = 0;
  for (size_t i = 0; i < layout->segs.size(); ++i) {
    blend::BlendSegment s = layout->segs[i];
    const int owner = layout->seg_piece[i];
    const int64_t len = static_cast<int64_t>(s.tokens.size()), end = off + len;
    Piece* p = owner >= 0 ? &(*pieces)[static_cast<size_t>(owner)] : nullptr;
    if (end <= P) {  // covered by the exact prefix
      if (p != nullptr) {
        p->covered = true;
        p->source.reset();
        p->store = nullptr;
      }
      off = end;
      continue;
    }
    if (off < P) {  // cut: its rows from P on
      const int64_t cut = P - off;
      s.tokens = s.tokens.subspan(static_cast<size_t>(cut));
      if (s.kind == blend::SegmentKind::kPrefix) s.kind = blend::SegmentKind::kChunk;
      if (s.kv != nullptr && p != nullptr) {
        ASSIGN_OR_RETURN(p->source, blend::SliceKvSource::Create(std::move(p->source), cut, len));
        s.kv = p->source.get();
      }
    }
    segs.push_back(s);
    owners.push_back(owner);
    off = end;
  }
  layout->segs = std::move(segs);
  layout->seg_piece = std::move(owners);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyPrefixCache(const Pipeline::Options& o, bool enabled, std::vector<Piece>* pieces,
                              BlendLayout* layout) {
  if (!enabled) return absl::OkStatus();
  RETURN_IF_ERROR(ApplyExactPrefix(o.store, o.model->fingerprint(), o.prefix_cache, pieces, layout));
  const int64_t P = static_cast<int64_t>(layout->exact_tokens.size());
  o.metrics->Add("ragkv_prefix_lookups_total", P > 0 ? "result=\"hit\"" : "result=\"miss\"");
  if (P > 0) o.metrics->Add("ragkv_prefix_tokens_reused_total", "", static_cast<double>(P));
  return absl::OkStatus();
}

int64_t ExactRows(const BlendLayout& layout, blend::Strategy strategy) {
  int64_t query_begin = 0;
  for (const blend::BlendSegment& s : layout.segs) {
    if (s.kind != blend::SegmentKind::kQuery) query_begin += static_cast<int64_t>(s.tokens.size());
  }
  // Everything that is not an exact first segment is prefilled.
  if (strategy == blend::Strategy::kFullPrefill || strategy == blend::Strategy::kPrefixReuse) {
    return query_begin;
  }
  int64_t rows = 0;
  for (size_t i = 0; i < layout.segs.size(); ++i) {
    const blend::BlendSegment& s = layout.segs[i];
    if (s.kind == blend::SegmentKind::kQuery) break;
    const bool exact = s.kv == nullptr || (i == 0 && s.kv->info().first_position == 0);
    if (!exact) break;  // reused rows: approximate from here on
    rows += static_cast<int64_t>(s.tokens.size());
  }
  return rows;
}

void StorePrefixCache(const Pipeline::Options& o, StoreBack* store_back, const BlendLayout& layout,
                      const std::vector<Piece>& pieces, const model::KVCache& cache,
                      int64_t exact_rows) {
  if (store_back == nullptr || !o.prefix_cache.enabled) return;
  const int B = o.prefix_cache.block_tokens;
  const int first = static_cast<int>(static_cast<int64_t>(layout.exact_tokens.size()) / B);
  const int last = static_cast<int>(std::min(exact_rows, o.prefix_cache.max_tokens) / B);
  if (last <= first) return;
  absl::StatusOr<std::vector<blend::StoreChunk>> blocks = blend::EncodePrefixBlocks(
      cache, layout.Tokens(pieces), o.model->fingerprint(), B, first, last,
      o.model->config().kv_dtype, store_back->codec(), &layout.traffic);
  if (!blocks.ok()) {
    RAGKV_LOG(WARNING) << "prefix cache: encoding blocks: " << blocks.status();
    return;
  }
  store_back->SchedulePut(std::move(*blocks));
}

}  // namespace ragkv::pipeline::internal
