// ttft_prefix.cc: the `prefix` rows of `ragkv bench ttft` (internal/ttft_internal.h):
// the prefix cache an engine with automatic prefix caching has, the
// sidecar's own mechanism (docs/blend.md, "Exact prefixes are exact rows").
// The longest chain of stored blocks covering the prompt's leading tokens is
// the exact first segment, the rest of the context is prefilled, and the
// blocks of the rows the request computed are stored after it (the sidecar
// stores them off the request's path; here after the clock stops). Before
// each prefix row the store forgets the blocks this prompt does not share
// with the previous prompt, so every repetition measures the same state:
// "the previous request was prompt i - 1".
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/prefix_source.h"
#include "blend/store_source.h"

namespace ragkv::services::ttft_internal {

std::vector<int32_t> ContextTokens(const Prompt& p) {
  std::vector<int32_t> t;
  for (const auto& c : p.chunks) t.insert(t.end(), c.begin(), c.end());
  return t;
}

int64_t SharedPrefixTokens(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const auto end = a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size()));
  const int64_t n = std::mismatch(a.begin(), end, b.begin()).first - a.begin();
  return n / kPrefixBlockTokens * kPrefixBlockTokens;
}

const Prompt& Previous(const std::vector<Prompt>& prompts, size_t i) {
  return prompts[(i + prompts.size() - 1) % prompts.size()];
}

int64_t SharedWithPrevious(const std::vector<Prompt>& prompts, size_t i) {
  return SharedPrefixTokens(ContextTokens(prompts[i]), ContextTokens(Previous(prompts, i)));
}

absl::Status ForgetUnsharedPrefix(kvstore::TieredStore* store, const kvstore::Fingerprint& fp,
                                  const std::vector<int32_t>& tokens,
                                  const std::vector<int32_t>& prev) {
  const std::vector<kvstore::ChunkKey> keys =
      blend::PrefixBlockKeys(fp, tokens, kPrefixBlockTokens);
  const size_t shared = static_cast<size_t>(SharedPrefixTokens(tokens, prev) / kPrefixBlockTokens);
  for (size_t i = shared; i < keys.size(); ++i) {
    if (absl::Status s = store->Delete(keys[i]); !s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<Outcome> RunPrefixRequest(const blend::Blender& blender, const model::Model& model,
                                         const Prompt& p, kvstore::TieredStore* store) {
  const kvstore::Fingerprint& fp = model.fingerprint();
  const std::vector<int32_t> tokens = ContextTokens(p);
  const int64_t context = static_cast<int64_t>(tokens.size());
  Outcome o;
  o.context = context;
  const double t0 = Now();
  const std::vector<kvstore::ChunkKey> keys =
      blend::PrefixBlockKeys(fp, tokens, kPrefixBlockTokens);
  std::unique_ptr<blend::PrefixKvSource> prefix;
  if (!keys.empty()) {
    ASSIGN_OR_RETURN(prefix, blend::PrefixKvSource::Open(store, keys, fp, kPrefixBlockTokens));
  }
  o.open_s = Now() - t0;
  const int64_t P = prefix ? prefix->info().num_tokens : 0;
  const absl::Span<const int32_t> all(tokens);
  std::vector<blend::BlendSegment> segs;
  if (P > 0) segs.push_back({blend::SegmentKind::kPrefix, all.subspan(0, P), prefix.get()});
  if (P < context) segs.push_back({blend::SegmentKind::kChunk, all.subspan(P), nullptr});
  segs.push_back({blend::SegmentKind::kQuery, p.query, nullptr});
  blend::BlendOptions bo;
  bo.strategy = blend::Strategy::kPrefixReuse;
  bo.overlap_loading = P > 0;
  ASSIGN_OR_RETURN(blend::BlendResult r, blender.Blend(segs, bo));
  o.ttft_s = Now() - t0;
  o.stages = r.timings;
  for (const auto& rows : r.recomputed) o.recomputed += static_cast<int64_t>(rows.size());
  const model::ModelConfig& cfg = model.config();
  o.kv_bytes = static_cast<uint64_t>(P) * cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim *
               
               kernels::DTypeSize(cfg.kv_dtype);
  o.prefix_tokens = P;
  // Store what this request computed exactly (off the clock).
  const int first = static_cast<int>(P / kPrefixBlockTokens);
  const int last = static_cast<int>(context / kPrefixBlockTokens);
  if (last > first) {
    ASSIGN_OR_RETURN(std::vector<blend::StoreChunk> blocks,
                     blend::EncodePrefixBlocks(r.cache, tokens, fp, kPrefixBlockTokens, first, last,
                                               cfg.kv_dtype, kvstore::Codec::kRaw));
    for (const blend::StoreChunk& b : blocks) RETURN_IF_ERROR(store->Put(b.key, b.chunk));
  }
  return o;
}

}  // namespace ragkv::services::ttft_internal
