#include "retrieval/chunker.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "retrieval/internal/text.h"

namespace ragkv::retrieval {
namespace {

// A packing unit: a word, or a piece of an over-long word.
struct Unit {
  size_t begin;
  size_t end;
  int64_t cost;  // tokens of (preceding whitespace + unit)
  bool ends_sentence;
  bool ends_paragraph;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Chunker>> Chunker::Create(ChunkerOptions options,
                                                         std::shared_ptr<const Tokenizer> tokenizer) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("Chunker: tokenizer is null");
  if (options.target_tokens < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("Chunker: target_tokens must be >= 8, got ", options.target_tokens));
  }
  if (options.overlap_tokens < 0 || options.overlap_tokens * 2 >= options.target_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Chunker: overlap_tokens must be in [0, target_tokens/2), got ", options.overlap_tokens));
  }
  return std::unique_ptr<Chunker>(new Chunker(options, std::move(tokenizer)));
}

absl::StatusOr<std::vector<ChunkSpan>> Chunker::Chunk(std::string_view text) const {
  const int64_t target = options_.target_tokens;
  std::vector<internal::WordSpan> words = internal::SplitWords(text);
  if (words.empty()) return absl::InvalidArgumentError("Chunker: text has no words");

  // Cost the words; split words that alone exceed the target.
  std::vector<Unit> units;
  units.reserve(words.size());
  size_t prev_end = words[0].begin;
  for (const internal::WordSpan& w : words) {
    const int64_t cost = static_cast<int64_t>(tokenizer_->Encode(text.substr(prev_end, w.end - prev_end)).size());
    if (cost <= target) {
      units.push_back(Unit{w.begin, w.end, cost, w.ends_sentence, w.ends_paragraph});
    } else {
      size_t pos = w.begin;
      size_t seg_start = prev_end;  // the first piece carries the whitespace
      while (pos < w.end) {
        std::string_view rest = text.substr(pos, w.end - pos);
        size_t guess = std::max<size_t>(1, rest.size() * static_cast<size_t>(target) /
                                               std::max<size_t>(1, tokenizer_->Encode(rest).size()));
        size_t len = internal::Utf8PrefixLength(rest, guess);
        int64_t c = static_cast<int64_t>(tokenizer_->Encode(text.substr(seg_start, pos + len - seg_start)).size());
        while (c > target && len > 1) {
          size_t shorter = internal::Utf8PrefixLength(rest, len / 2);
          if (shorter >= len) break;
          len = shorter;
          c = static_cast<int64_t>(tokenizer_->Encode(text.substr(seg_start, pos + len - seg_start)).size());
        }
        const bool last = pos + len >= w.end;
        units.push_back(Unit{pos, pos + len, c, last && w.ends_sentence, last && w.ends_paragraph});
        pos += len;
        seg_start = pos;
      }
    }
    prev_end = w.end;
  }

  std::vector<ChunkSpan> chunks;
  auto make_chunk = [&](size_t first, size_t last_excl, uint64_t token_begin) {
    ChunkSpan c;
    c.ordinal = static_cast<int32_t>(chunks.size());
    c.byte_begin = units[first].begin;
    c.byte_end = units[last_excl - 1].end;
    c.text = std::string(text.substr(c.byte_begin, c.byte_end - c.byte_begin));
    c.token_ids = tokenizer_->Encode(c.text);
    c.token_begin = token_begin;
    return c;
  };

  std::vector<int64_t> prefix(units.size() + 1, 0);
  for (size_t i = 0; i < units.size(); ++i) prefix[i + 1] = prefix[i] + units[i].cost;

  // Passage-aware: a text that fits whole is one chunk. Only a text whose
  // word costs stay near the target can fit (a word's cost already holds its
  // leading space, so merging across words saves little): a long document
  // is never encoded whole (a 4 MB text through a merging tokenizer took
  // gigabytes), keeping chunking memory proportional to one chunk.
  if (prefix.back() <= 2 * target) {
    ChunkSpan whole = make_chunk(0, units.size(), 0);
    if (static_cast<int64_t>(whole.token_ids.size()) <= target) {
      chunks.push_back(std::move(whole));
      return chunks;
    }
  }

  size_t start = 0;
  while (start < units.size()) {
    // Greedy fill. The first unit's cost counts its leading whitespace too,
    // so it is an upper bound.
    size_t end = start;
    while (end < units.size() && prefix[end + 1] - prefix[start] <= target) ++end;
    if (end == start) end = start + 1;  // cannot happen (units fit), but guarantee progress
    size_t cut = end;
    if (end < units.size()) {
      const int64_t half = target / 2;
      size_t para = 0, sent = 0;
      for (size_t k = end; k > start + 1; --k) {
        const Unit& u = units[k - 1];
        if (prefix[k] - prefix[start] < half) break;
        if (para == 0 && u.ends_paragraph) para = k;
        if (sent == 0 && u.ends_sentence) sent = k;
        if (para != 0) break;
      }
      if (para != 0) {
        cut = para;
      } else if (sent != 0) {
        cut = sent;
      }
    }
    ChunkSpan c = make_chunk(start, cut, static_cast<uint64_t>(prefix[start]));
    while (static_cast<int64_t>(c.token_ids.size()) > target && cut > start + 1) {
      --cut;
      c = make_chunk(start, cut, static_cast<uint64_t>(prefix[start]));
    }
    chunks.push_back(std::move(c));
    if (cut >= units.size()) break;
    size_t next = cut;
    if (options_.overlap_tokens > 0) {
      while (next > start + 1 && prefix[cut] - prefix[next - 1] <= options_.overlap_tokens) --next;
    }
    start = next;
  }
  return chunks;
}

}  // namespace ragkv::retrieval
