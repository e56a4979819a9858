#include "retrieval/chunk_matcher.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "base/status_macros.h"

namespace ragkv::retrieval {
namespace {

constexpr uint64_t kBase = 0x100000001b3ull * 0x9e3779b97f4a7c15ull | 1;  // odd

uint64_t Mix(int32_t token) { return (uint64_t{static_cast<uint32_t>(token)} + 1) * 0xff51afd7ed558ccdull; }

uint64_t Pow(uint64_t b, int e) {
  uint64_t r = 1;
  for (int i = 0; i < e; ++i) r *= b;
  return r;
}

uint64_t HashOf(absl::Span<const int32_t> t) {
  uint64_t h = 0;
  for (int32_t x : t) h = h * kBase + Mix(x);
  return h;
}

}  // namespace

ChunkMatcher::ChunkMatcher(ChunkMatchOptions options) : o_(options) {
  o_.window = std::max(1, o_.window);
  o_.boundary_slack = std::max(0, o_.boundary_slack);
  if (o_.min_chunk_tokens <= 0) o_.min_chunk_tokens = o_.window;
}

uint64_t ChunkMatcher::Key(uint64_t hash, int length) {
  uint64_t k = hash ^ (uint64_t(length) * 0x9e3779b97f4a7c15ull);
  k ^= k >> 33;
  return k * 0xc4ceb9fe1a85ec53ull;
}

void ChunkMatcher::Add(int64_t chunk_id, absl::Span<const int32_t> tokens) {
  Remove(chunk_id);
  if (tokens.empty() || static_cast<int64_t>(tokens.size()) < o_.min_chunk_tokens) return;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int w = static_cast<int>(std::min<int64_t>(o_.window, n));
  std::vector<int32_t> offsets = {0};
  if (n >= o_.window + o_.boundary_slack && o_.boundary_slack > 0) {
    offsets.push_back(o_.boundary_slack);
  }
  Indexed& ix = chunks_[chunk_id];
  ix.tokens = n;
  for (int32_t off : offsets) {
    const uint64_t key = Key(HashOf(tokens.subspan(off, w)), w);
    anchors_[key].push_back({chunk_id, off});
    ix.windows.emplace_back(w, key);
    ++lengths_[w];
  }
}

void ChunkMatcher::Remove(int64_t chunk_id) {
  auto it = chunks_.find(chunk_id);
  if (it == chunks_.end()) return;
  for (const auto& [w, key] : it->second.windows) {
    auto a = anchors_.find(key);
    if (a != anchors_.end()) {
      std::erase_if(a->second, [&](const Anchor& x) { return x.chunk_id == chunk_id; });
      if (a->second.empty()) anchors_.erase(a);
    }
    if (--lengths_[w] == 0) lengths_.erase(w);
  }
  chunks_.erase(it);
}

std::vector<ChunkMatcher::Candidate> ChunkMatcher::Probe(absl::Span<const int32_t> prompt) const {
  std::vector<Candidate> out;
  const int64_t P = static_cast<int64_t>(prompt.size());
  for (const auto& [w, count] : lengths_) {
    if (P < w) continue;
    const uint64_t top = Pow(kBase, w);
    uint64_t h = HashOf(prompt.subspan(0, w));
    for (int64_t pos = 0;; ++pos) {
      if (auto a = anchors_.find(Key(h, w)); a != anchors_.end()) {
        for (const Anchor& x : a->second) out.push_back({x.chunk_id, pos, x.offset, w});
      }
      if (pos + w >= P) break;
      h = h * kBase + Mix(prompt[pos + w]) - Mix(prompt[pos]) * top;
    }
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.pos, a.chunk_id, a.offset) < std::tie(b.pos, b.chunk_id, b.offset);
  });
  return out;
}

absl::StatusOr<std::vector<ChunkMatch>> ChunkMatcher::Find(absl::Span<const int32_t> prompt,
                                                           const TokensFn& tokens_of) const {
  const int64_t P = static_cast<int64_t>(prompt.size());
  absl::flat_hash_map<int64_t, std::optional<std::vector<int32_t>>> cache;
  std::vector<ChunkMatch> found;
  absl::flat_hash_map<int64_t, int64_t> reach;  // chunk -> furthest end of its matches
  for (const Candidate& c : Probe(prompt)) {
    // Candidates come in prompt order: a window inside a match of the same
    // chunk found already adds nothing (and keeps periodic runs linear).
    if (auto r = reach.find(c.chunk_id); r != reach.end() && c.pos + c.length <= r->second) continue;
    auto it = cache.find(c.chunk_id);
    if (it == cache.end()) {
      ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> t, tokens_of(c.chunk_id));
      it = cache.emplace(c.chunk_id, std::move(t)).first;
    }
    if (!it->second) continue;
    const std::vector<int32_t>& ch = *it->second;
    const int64_t n = static_cast<int64_t>(ch.size());
    if (n < c.offset + c.length ||
        !std::equal(ch.begin() + c.offset, ch.begin() + c.offset + c.length,
                    prompt.begin() + c.pos)) {
      continue;  // a hash collision, or the chunk changed since it was indexed
    }
    int64_t i = c.offset, p = c.pos;
    while (i > 0 && p > 0 && prompt[p - 1] == ch[i - 1]) --i, --p;
    int64_t j = c.offset + c.length, q = c.pos + c.length;
    while (j < n && q < P && prompt[q] == ch[j]) ++j, ++q;
    const ChunkMatch m{c.chunk_id, p, i, j, n};
    if (!m.whole() &&
        (n < o_.window || i > o_.boundary_slack || n - j > o_.boundary_slack)) {
      continue;  // differs inside the chunk: another text, not a boundary
    }
    found.push_back(m);
    reach[c.chunk_id] = std::max(reach[c.chunk_id], m.prompt_end());
  }
  return ResolveOverlaps(std::move(found), o_.window);
}

std::vector<ChunkMatch> ResolveOverlaps(std::vector<ChunkMatch> matches, int window) {
  std::sort(matches.begin(), matches.end(), [](const ChunkMatch& a, const ChunkMatch& b) {
    return std::make_tuple(a.prompt_begin, -a.size(), a.chunk_id, a.chunk_begin) <
           std::make_tuple(b.prompt_begin, -b.size(), b.chunk_id, b.chunk_begin);
  });
  matches.erase(std::unique(matches.begin(), matches.end()), matches.end());
  std::vector<ChunkMatch> out;
  int64_t cursor = 0;
  for (ChunkMatch m : matches) {
    if (m.prompt_end() <= cursor) continue;
    if (m.prompt_begin < cursor) {  // overlaps the accepted one: cut its head
      m.chunk_begin += cursor - m.prompt_begin;
      m.prompt_begin = cursor;
      if (m.size() < window) continue;
    }
    out.push_back(m);
    cursor = m.prompt_end();
  }
  return out;
}

}  // namespace ragkv::retrieval
