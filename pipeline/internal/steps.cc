#include "pipeline/internal/steps.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "blend/quality_gate.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace ragkv::pipeline::internal {

void DropBadRecord(const Pipeline::Options& o, const kvstore::ChunkKey& key,
                   const absl::Status& st) {
  if (absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st)) return;
  if (absl::Status d = o.store->Delete(key); !d.ok()) {
    RAGKV_LOG(WARNING) << "deleting failed record " << key.ToHex() << ": " << d;
  }
}

void MapSegments(const Pipeline::Options& o, bool add_bos, const std::vector<Piece>& pieces,
                 BlendLayout* out) {
  std::vector<int32_t>& prefix = out->prefix;
  const model::Tokenizer* tok = o.tokenizer;
  if (add_bos && tok != nullptr && tok->add_bos()) prefix.push_back(tok->bos_id());
  size_t first = 0;
  while (first + 1 < pieces.size() && !pieces[first].is_chunk) {
    prefix.insert(prefix.end(), pieces[first].tokens.begin(), pieces[first].tokens.end());
    ++first;
  }
  out->first = first;
  BuildSegs(pieces, out);
  uint32_t pos = 0;
  if (!prefix.empty()) {
    pos = static_cast<uint32_t>(prefix.size());
    out->spans.push_back({0, pos});
  }
  for (size_t i = first; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    Span sp;
    sp.begin = pos;
    pos += static_cast<uint32_t>(p.tokens.size());
    sp.end = pos;
    sp.chunk_id = p.chunk_id;
    sp.is_chunk = p.is_chunk;
    sp.chunk_begin = static_cast<uint32_t>(p.chunk_begin);
    sp.cache_hit = p.source != nullptr;
    out->spans.push_back(sp);
  }
  out->T = pos;
}

bool ReleaseUnused(blend::Strategy strategy, const BlendLayout& layout, std::vector<Piece>* pieces) {
  if (strategy != blend::Strategy::kFullPrefill && strategy != blend::Strategy::kPrefixReuse) {
    return false;
  }
  const bool keep_first = strategy == blend::Strategy::kPrefixReuse && layout.prefix.empty();
  bool any = false;
  for (size_t i = 0; i < pieces->size(); ++i) {
    Piece& p = (*pieces)[i];
    if (p.source == nullptr || (keep_first && i == layout.first)) continue;
    p.source.reset();
    p.store = nullptr;
    p.released = true;
    any = true;
  }
  return any;
}

std::vector<Miss> Misses(const std::vector<Piece>& pieces) {
  std::vector<Miss> out;
  for (const Piece& p : pieces) {
    if (p.is_chunk && p.source == nullptr && !p.covered && !p.released) {
      out.push_back({p.key, p.whole.empty() ? p.tokens : p.whole});
    }
  }
  return out;
}

std::optional<double> RequestCap(const RequestOptions& ro) {
  if (ro.ratio > 0) return ro.ratio;
  if (ro.adaptive_budget > 0) return std::min(1.0, 3 * ro.adaptive_budget);
  return std::nullopt;
}

blend::BlendOptions StrategyOptions(const Pipeline::Options& o, const RequestOptions& ro) {
  blend::BlendOptions bo;
  bo.logits = blend::QueryLogits::kNone;
  bo.overlap_loading = true;  // layer l+1 streams from the store while layer l is computed
  bo.cache_pool = o.cache_pool;
  switch (ro.mode) {
    case Mode::kFullPrefill: bo.strategy = blend::Strategy::kFullPrefill; break;
    case Mode::kPrefixReuse: bo.strategy = blend::Strategy::kPrefixReuse; break;
    case Mode::kFullReuse: bo.strategy = blend::Strategy::kFullReuse; break;
    case Mode::kAuto:
      // The controller's ratio replaces this later; without a controller
      // (or a cached chunk) the server default, never the request's.
      bo.strategy = blend::Strategy::kCacheBlend;
      bo.ratio = o.default_ratio;
      break;
    case Mode::kCacheBlend:
      bo.strategy = blend::Strategy::kCacheBlend;
      bo.ratio = RequestCap(ro).value_or(o.default_ratio);
      break;
  }
  if (ro.selector) bo.selector = *ro.selector;
  bo.chunk_head_tokens = ro.chunk_head_tokens;
  bo.lookahead_layers = ro.lookahead_layers;
  if (ro.mode == Mode::kCacheBlend) {
    bo.adaptive_mass = ro.adaptive_mass;
    bo.adaptive_threshold = ro.adaptive_threshold;
  }
  return bo;
}

std::string ApplyQualityGate(const Pipeline::Options& o, const RequestOptions& ro,
                             blend::BlendOptions* bo, bool* controlled) {
  const blend::GateDecision* g = o.quality_gate;
  if (g == nullptr) return "";
  if (ro.pinned) return g->reason;
  const bool blends =
      bo->strategy == blend::Strategy::kCacheBlend || bo->strategy == blend::Strategy::kFullReuse;
  if (!g->blending && blends) {
    bo->strategy = blend::Strategy::kFullPrefill;
    bo->ratio = 0;
    *controlled = false;
    o.metrics->Add("ragkv_blend_gated_total", "");
    return g->reason;
  }
  if (bo->strategy == blend::Strategy::kCacheBlend) {
    if (!ro.selector) bo->selector = g->selector;
    if (ro.mode != Mode::kAuto && !RequestCap(ro)) bo->ratio = g->ratio;
  }
  return g->reason;
}

std::vector<blend::Tier> ServedTiers(const Pipeline::Options& o, const std::vector<Piece>& pieces) {
  std::vector<blend::Tier> served;
  for (const Piece& p : pieces) {
    if (p.store == nullptr) continue;
    const std::optional<blend::Tier> t = blend::CostTierOf(o.store->tier(p.store->tier_index()).Kind());
    if (t && std::find(served.begin(), served.end(), *t) == served.end()) served.push_back(*t);
  }
  return served;
}

void ObserveBandwidth(const Pipeline::Options& o, const blend::BlendOptions& bo,
                      const std::vector<blend::Tier>& served, const std::vector<Piece>& pieces,
                      const blend::BlendResult& r) {
  const bool loads_all = bo.strategy == blend::Strategy::kCacheBlend ||
                         bo.strategy == blend::Strategy::kFullReuse;
  if (o.controller == nullptr || !loads_all || served.size() != 1 || r.timings.load_s <= 0) return;
  // Bytes over the time the loader spent in ReadLayer (stream + decode; the
  // tier-side counters would also count the producer's waits on a full queue).
  uint64_t bytes = 0;
  for (const Piece& p : pieces) {
    if (p.store != nullptr) bytes += p.store->bytes_read();
  }
  if (bytes > 0) {
    o.controller->ObserveTierBandwidth(served.front(), static_cast<double>(bytes) / r.timings.load_s);
  }
}

void ObserveTierReads(const Pipeline::Options& o, blend::Strategy strategy,
                      const std::vector<Piece>& pieces) {
  // Streams still parked on a full queue (e.g. under full prefill) say
  // nothing about the tier.
  if (strategy != blend::Strategy::kCacheBlend && strategy != blend::Strategy::kFullReuse) return;
  for (const Piece& p : pieces) {
    if (p.store == nullptr || !p.store->finished()) continue;
    o.metrics->Observe(
        "ragkv_tier_read_ms",
        absl::StrFormat("tier=\"%s\"", std::string(o.store->tier(p.store->tier_index()).Name())),
        p.store->read_seconds() * 1e3);
  }
}

bool MarkFailedLoad(const Pipeline::Options& o, const absl::Status& st,
                    std::vector<Piece>* pieces, BlendLayout* layout, FailedLoad* fl) {
  const std::optional<blend::FailedLoad> f = blend::FailedLoadOf(st);
  if (!f || f->segment < 0 || f->segment >= static_cast<int>(layout->seg_piece.size())) {
    return false;
  }
  const int owner = layout->seg_piece[static_cast<size_t>(f->segment)];
  fl->layer = static_cast<uint32_t>(f->layer);
  fl->reason = std::string(st.message());
  if (owner == kExactSegment) {
    layout->exact_failed = true;  // span 0, chunk 0: the prompt's stored prefix
  } else if (owner >= 0 && (*pieces)[static_cast<size_t>(owner)].source != nullptr) {
    Piece& bad = (*pieces)[static_cast<size_t>(owner)];
    bad.failed = true;
    // A layer missing, corrupt or cut: the record is rewritten.
    DropBadRecord(o, bad.context == kvstore::RecordContext::kNeighbours ? bad.record_key : bad.key,
                  st);
    fl->span = layout->SpanOf(static_cast<size_t>(owner));
    fl->chunk_id = bad.chunk_id;
  } else {
    return false;
  }
  o.metrics->Add("ragkv_blend_failed_loads_total",
                 absl::StrFormat("code=\"%s\"", absl::StatusCodeToString(st.code())));
  RAGKV_LOG(WARNING) << "blend: "
                     << (owner < 0 ? std::string("the stored exact prefix")
                                   : absl::StrCat("chunk ", fl->chunk_id, " (span ", fl->span, ")"))
                     << " failed at layer " << f->layer << ", recomputed as a miss: " << st;
  return true;
}

}  // namespace ragkv::pipeline::internal
