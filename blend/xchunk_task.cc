#include "blend/xchunk_task.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace ragkv::blend {

std::string XchunkModelPath() {
  const char* env = std::getenv("RAGKV_XCHUNK_MODEL");
  if (env != nullptr && *env != '\0') return env;
  return RAGKV_SOURCE_DIR "/models/xchunk.gguf";
}

absl::StatusOr<XchunkPrompt> MakeXchunkPrompt(uint64_t seed, int index, int pairs, int chunks) {
  if (chunks < 2 || pairs < chunks || pairs > kXchunkKeys) {
    return absl::InvalidArgumentError(absl::StrCat(
        "xchunk task: need 2 <= chunks <= pairs <= ", kXchunkKeys, " (got chunks=", chunks,
        ", pairs=", pairs, ")"));
  }
  std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ull + static_cast<uint64_t>(index) * 104729 + 7);
  std::vector<int> keys(kXchunkKeys);
  std::iota(keys.begin(), keys.end(), 0);
  std::shuffle(keys.begin(), keys.end(), rng);
  std::uniform_int_distribution<int> value(0, kXchunkValues - 1);
  std::vector<int32_t> ctx;
  std::vector<int32_t> values(pairs);
  for (int i = 0; i < pairs; ++i) {
    values[i] = kXchunkValue0 + value(rng);
    ctx.push_back(kXchunkKey0 + keys[i]);
    ctx.push_back(values[i]);
  }
  std::vector<size_t> cuts;
  for (int j = 1; j < chunks; ++j) {
    cuts.push_back(2 * static_cast<size_t>(std::lround(double(pairs) * j / chunks)) + 1);
  }
  XchunkPrompt p;
  p.prefix = {kXchunkBos};
  size_t start = 0;
  for (size_t c = 0; c <= cuts.size(); ++c) {
    const size_t end = c < cuts.size() ? cuts[c] : ctx.size();
    p.chunks.emplace_back(ctx.begin() + start, ctx.begin() + end);
    start = end;
  }
  std::uniform_int_distribution<size_t> pick(0, cuts.size() - 1);
  const size_t pair = (cuts[pick(rng)] - 1) / 2;
  p.query = {kXchunkQuery, kXchunkKey0 + keys[pair]};
  p.answer = values[pair];
  return p;
}

}  // namespace ragkv::blend
