// chunk_matcher.h: ChunkMatcher finds stored chunks inside an arbitrary
// token sequence (raw-token blending, issue 18: an engine sends its whole
// prompt and needs no knowledge of chunk boundaries).
//
// Index: each chunk of at least `min_chunk_tokens` (default: the window)
// contributes anchor windows of `window` tokens (at its offset 0, and at
// offset `boundary_slack` when it is long enough), hashed with a
// polynomial rolling hash over token ids. Find() rolls the hash over the
// prompt, probing every position; every hit is verified token by token
// against the chunk's own tokens (those its KV record's content key was
// computed from), then extended both ways as far as prompt and chunk agree.
// A match is the whole chunk, or the chunk less at most `boundary_slack`
// tokens at either end (tokens around a chunk that tokenized differently in
// context than alone: those become fresh rows, not a miss of the chunk).
// Overlapping matches are resolved deterministically: by prompt position,
// then longer first, then lower chunk id; a later match overlapping an
// accepted one loses its head rows (kept if >= `window` rows remain).
// Candidates inside a match already found for the same chunk are skipped
// (linear time on periodic token runs; a periodic chunk may then be found
// at fewer of its possible alignments).
//
// Thread safety: Add/Remove need exclusive access; Find is const and may
// run concurrently with other Finds. The owner (Retriever) locks.
#ifndef RAGKV_RETRIEVAL_CHUNK_MATCHER_H_
#define RAGKV_RETRIEVAL_CHUNK_MATCHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ragkv::retrieval {

struct ChunkMatchOptions {
  int window = 16;         // anchor length in tokens (>= 1)
  int boundary_slack = 8;  // tokens a match may lack at either end of its chunk
  // Chunks shorter than this are not indexed (a 2-token chunk would match
  // every occurrence of its two tokens); 0 = window.
  int min_chunk_tokens = 0;
};

// ChunkMatch: rows [chunk_begin, chunk_end) of chunk `chunk_id` equal the
// prompt's tokens at [prompt_begin, prompt_begin + chunk_end - chunk_begin).
struct ChunkMatch {
  int64_t chunk_id = -1;
  int64_t prompt_begin = 0;
  int64_t chunk_begin = 0;
  int64_t chunk_end = 0;
  int64_t chunk_tokens = 0;  // the chunk's length (whole iff [0, chunk_tokens))
  int64_t size() const { return chunk_end - chunk_begin; }
  int64_t prompt_end() const { return prompt_begin + size(); }
  bool whole() const { return chunk_begin == 0 && chunk_end == chunk_tokens; }
  bool operator==(const ChunkMatch&) const = default;
};

class ChunkMatcher {
 public:
  explicit ChunkMatcher(ChunkMatchOptions options = {});

  // Add: indexes a chunk (replacing an earlier one of the same id); a chunk
  // shorter than min_chunk_tokens is not indexed.
  void Add(int64_t chunk_id, absl::Span<const int32_t> tokens);
  void Remove(int64_t chunk_id);
  size_t size() const { return chunks_.size(); }

  // TokensFn: a chunk's tokens by id (nullopt: gone since it was indexed).
  using TokensFn =
      std::function<absl::StatusOr<std::optional<std::vector<int32_t>>>(int64_t chunk_id)>;
  // Find: the resolved, non-overlapping matches in prompt order. Errors
  // only those of tokens_of.
  absl::StatusOr<std::vector<ChunkMatch>> Find(absl::Span<const int32_t> prompt,
                                               const TokensFn& tokens_of) const;

 private:
  struct Anchor {
    int64_t chunk_id;
    int32_t offset;  // where the window starts in the chunk
  };
  struct Indexed {
    int64_t tokens = 0;
    std::vector<std::pair<int, uint64_t>> windows;  // (length, hash) it added
  };
  struct Candidate {
    int64_t chunk_id;
    int64_t pos;     // prompt position of the window
    int32_t offset;  // the window's offset in the chunk
    int length;      // the window's length
  };

  std::vector<Candidate> Probe(absl::Span<const int32_t> prompt) const;
  static uint64_t Key(uint64_t hash, int length);

  ChunkMatchOptions o_;
  absl::flat_hash_map<uint64_t, std::vector<Anchor>> anchors_;  // Key -> anchors
  absl::flat_hash_map<int64_t, Indexed> chunks_;
  std::map<int, int64_t> lengths_;  // window length -> windows of that length
};

// ResolveOverlaps: the deterministic rule above over verified matches.
std::vector<ChunkMatch> ResolveOverlaps(std::vector<ChunkMatch> matches, int window);

}  // namespace ragkv::retrieval

#endif  // RAGKV_RETRIEVAL_CHUNK_MATCHER_H_
