// ttft_prefix.cc: the state of the `prefix` rows of `ragkv bench ttft`
// (internal/ttft_internal.h). A prefix row is a served request in prefix
// caching mode (pipeline/pipeline.h: the longest chain of stored blocks
// covering the prompt's leading tokens is exact, the rest prefilled, the
// blocks it computed stored back after the clock stops; docs/blend.md,
// "Exact prefixes are exact rows"). Before each prefix row the store
// forgets the blocks this prompt does not share with the previous prompt,
// so every repetition measures the same state: "the previous request was
// prompt i - 1".
#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/prefix_source.h"

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
      kvstore::PrefixBlockKeys(fp, tokens, kPrefixBlockTokens);
  const size_t shared = static_cast<size_t>(SharedPrefixTokens(tokens, prev) / kPrefixBlockTokens);
  for (size_t i = shared; i < keys.size(); ++i) {
    if (absl::Status s = store->Delete(keys[i]); !s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

}  // namespace ragkv::services::ttft_internal
