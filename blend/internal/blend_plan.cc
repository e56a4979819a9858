#include "blend/internal/blend_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "blend/recompute_budget.h"

namespace ragkv::blend::internal {
namespace {

bool ValidRatio(double r) { return std::isfinite(r) && r >= 0.0 && r <= 1.0; }

absl::Status CheckSource(const ChunkInfo& info, const model::Model& model, size_t seg,
                         size_t tokens) {
  const model::ModelConfig& cfg = model.config();
  if (info.fingerprint != model.fingerprint()) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ", seg, ": cached KV has fingerprint ",
                     model::FingerprintHex(info.fingerprint), ", model is ",
                     model.fingerprint_hex()));
  }
  if (info.num_layers != cfg.n_layers || info.kv_heads != cfg.n_kv_heads ||
      info.head_dim != cfg.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment ", seg, ": cached KV layout layers=", info.num_layers, " kv_heads=",
        info.kv_heads, " head_dim=", info.head_dim, " disagrees with the model (layers=",
        cfg.n_layers, " kv_heads=", cfg.n_kv_heads, " head_dim=", cfg.head_dim, ")"));
  }
  if (info.dtype != cfg.kv_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment ", seg, ": cached KV dtype ", kernels::DTypeName(info.dtype),
        " disagrees with the model's KV dtype ", kernels::DTypeName(cfg.kv_dtype)));
  }
  if (info.num_tokens != static_cast<int64_t>(tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("segment ", seg, ": cached KV holds ",
                                                   info.num_tokens, " tokens, segment has ",
                                                   tokens));
  }
  return absl::OkStatus();
}

// ValidateOptions: the checks of `options` that come before any segment's.
absl::Status ValidateOptions(const BlendOptions& options) {
  if (!ValidRatio(options.ratio)) {
    return absl::InvalidArgumentError(
        absl::StrCat("blend ratio must be in [0, 1], got ", options.ratio));
  }
  if (options.extra_capacity_tokens < 0) {
    return absl::InvalidArgumentError("extra_capacity_tokens must be >= 0");
  }
  const bool mass_ok = options.adaptive_mass >= 0 && options.adaptive_mass <= 1 &&
                       options.adaptive_threshold >= 0;
  const bool adaptive = options.adaptive_mass != 0 || options.adaptive_threshold != 0 ||
                        options.recompute_budget != nullptr;
  const bool min_ok = !adaptive ||
                      (options.adaptive_min >= 0 && options.adaptive_min <= options.ratio);
  if (!mass_ok || !min_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adaptive ratio: need 0 <= adaptive_mass <= 1, adaptive_threshold >= 0 and 0 <= adaptive_min "
        "<= ratio (got mass ",
        options.adaptive_mass, ", min ", options.adaptive_min, ", ratio ", options.ratio, ")"));
  }
  if (options.recompute_budget != nullptr &&
      options.adaptive_min > options.recompute_budget->options().budget) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adaptive_min ", options.adaptive_min, " is above the recompute budget ",
        options.recompute_budget->options().budget, ": it would break the budget's ceiling"));
  }
  if (options.lookahead_layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookahead_layers must be >= 0, got ", options.lookahead_layers));
  }
  if (options.overlap_loading && options.prefetch_layers < 1) {
    return absl::InvalidArgumentError("prefetch_layers must be >= 1");
  }
  return absl::OkStatus();
}

// LayOutSegments: validates the segments (order, sources, token ids, context
// length) and sets p->seg_offset and p->total.
absl::Status LayOutSegments(absl::Span<const BlendSegment> segments, const model::Model& model,
                            Plan* p) {
  const model::ModelConfig& cfg = model.config();
  size_t chunks = 0;
  bool has_query = false;
  for (size_t i = 0; i < segments.size(); ++i) {
    const BlendSegment& s = segments[i];
    if (s.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat("segment ", i, " is empty"));
    if (has_query) return absl::InvalidArgumentError("the query must be the last segment");
    switch (s.kind) {
      case SegmentKind::kPrefix:
        if (i != 0) return absl::InvalidArgumentError("the system prefix must be the first segment");
        break;
      case SegmentKind::kChunk:
        ++chunks;
        break;
      case SegmentKind::kQuery:
        if (s.kv != nullptr) return absl::InvalidArgumentError("the query cannot have cached KV");
        has_query = true;
        break;
    }
    if (s.kv != nullptr) RETURN_IF_ERROR(CheckSource(s.kv->info(), model, i, s.tokens.size()));
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= cfg.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("segment ", i, ": token id ", t, " outside [0, ", cfg.vocab_size, ")"));
      }
    }
    p->seg_offset.push_back(p->total);
    p->total += static_cast<int64_t>(s.tokens.size());
  }
  if (chunks == 0) return absl::InvalidArgumentError("blend: empty chunk list");
  if (!has_query) return absl::InvalidArgumentError("blend: no query segment");
  if (p->total > cfg.max_seq_len) {
    return absl::OutOfRangeError(absl::StrCat("blend: prompt of ", p->total,
                                              " tokens exceeds the model context of ",
                                              cfg.max_seq_len));
  }
  return absl::OkStatus();
}

// PlanSchedule: for kCacheBlend, sets p->schedule (options.schedule, or
// MakeSchedule when empty) and validates it; other strategies have none.
absl::Status PlanSchedule(const BlendOptions& options, const model::ModelConfig& cfg, Plan* p) {
  if (options.strategy != Strategy::kCacheBlend) return absl::OkStatus();
  p->schedule = options.schedule.empty() ? MakeSchedule(options, cfg) : options.schedule;
  int prev = -1;
  for (const CheckLayer& c : p->schedule) {
    if (!ValidRatio(c.ratio)) {
      return absl::InvalidArgumentError(
          absl::StrCat("check layer ", c.layer, ": ratio ", c.ratio, " outside [0, 1]"));
    }
    if (c.layer <= prev || c.layer < 0 || c.layer >= cfg.n_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "check layers must increase within [0, ", cfg.n_layers, "), got ", c.layer));
    }
    prev = c.layer;
  }
  return absl::OkStatus();
}

// SegmentClass: the row class of a cached segment's rows under the strategy;
// false when the segment is not loaded at all.
bool SegmentClass(Strategy strategy, bool exact, uint8_t* cls) {
  switch (strategy) {
    case Strategy::kFullPrefill:
      return false;  // nothing is loaded
    case Strategy::kPrefixReuse:
      if (!exact) return false;
      *cls = kExactRow;
      return true;
    case Strategy::kFullReuse:
    case Strategy::kCacheBlend:
      *cls = exact ? kExactRow : kSelectable;
      return true;
  }
  return false;
}

// ClassifyRows: fills p->tokens, the query span, p->row_class, p->load_segments
// and p->selectable from the laid-out segments (needs p->seg_offset, p->total).
void ClassifyRows(absl::Span<const BlendSegment> segments, const BlendOptions& options, Plan* p) {
  p->tokens.reserve(p->total);
  p->row_class.assign(p->total, kForced);
  for (size_t i = 0; i < segments.size(); ++i) {
    const BlendSegment& s = segments[i];
    p->tokens.insert(p->tokens.end(), s.tokens.begin(), s.tokens.end());
    if (s.kind == SegmentKind::kQuery) {
      p->query_begin = p->seg_offset[i];
      p->query_tokens = static_cast<int64_t>(s.tokens.size());
    }
    if (s.kv == nullptr) continue;
    uint8_t cls = kForced;
    // Exact only when the rows are the chunk's from its own start (a slice
    // at offset 0 attended to head rows the prompt does not have).
    const bool exact = p->seg_offset[i] == 0 && s.kv->info().first_position == 0;
    if (!SegmentClass(options.strategy, exact, &cls)) continue;
    p->load_segments.push_back(static_cast<int>(i));
    const int64_t begin = p->seg_offset[i];
    const int64_t end = begin + static_cast<int64_t>(s.tokens.size());
    for (int64_t t = begin; t < end; ++t) p->row_class[t] = cls;
    if (cls == kSelectable && options.strategy == Strategy::kCacheBlend) {
      const int64_t head =
          std::min<int64_t>(std::max(0, options.chunk_head_tokens), end - begin);
      for (int64_t t = begin; t < begin + head; ++t) p->row_class[t] = kForced;
    }
    for (int64_t t = begin; t < end; ++t) p->selectable += p->row_class[t] == kSelectable;
  }
}

}  // namespace

absl::StatusOr<Plan> MakePlan(absl::Span<const BlendSegment> segments,
                              const BlendOptions& options, const model::Model& model) {
  RETURN_IF_ERROR(ValidateOptions(options));
  Plan p;
  RETURN_IF_ERROR(LayOutSegments(segments, model, &p));
  RETURN_IF_ERROR(PlanSchedule(options, model.config(), &p));
  ClassifyRows(segments, options, &p);
  p.blend_from_layer0 = options.strategy == Strategy::kCacheBlend && options.ratio > 0;
  if (options.strategy == Strategy::kCacheBlend && options.ratio == 0) p.schedule.clear();
  return p;
}

}  // namespace ragkv::blend::internal
