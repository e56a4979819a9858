// layout.h: how the pipeline maps a request's resolved pieces onto Blender
// segments (pipeline/pipeline.cc builds them; internal/prefix_cache.h puts a
// stored exact prefix in front). Private to pipeline/.
#ifndef RAGKV_PIPELINE_INTERNAL_LAYOUT_H_
#define RAGKV_PIPELINE_INTERNAL_LAYOUT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "blend/blender.h"
#include "blend/kv_source.h"
#include "blend/prefix_source.h"
#include "blend/store_source.h"
#include "kvstore/chunk_key.h"
#include "pipeline/request.h"

namespace ragkv::pipeline::internal {

// Piece: one resolved segment of the request.
struct Piece {
  std::vector<int32_t> tokens;
  bool is_chunk = false;  // a catalogue chunk (chunk_id valid) or a document (chunk_id 0)
  uint64_t chunk_id = 0;
  // key: its record's store key (is_chunk): a catalogue chunk's under the
  // model's fingerprint, a document's or passage's under the request's
  // (salted) one; store-back writes a miss under it.
  kvstore::ChunkKey key;
  // context: kNeighbours when `source` reads the chunk's neighbour-aware or
  // first-position record, stored under record_key (key stays the plain
  // one, which store-back writes on a miss); neighbour_fallback: a
  // neighbour-aware record was looked for and the plain record (or fresh
  // rows) used instead.
  kvstore::RecordContext context = kvstore::RecordContext::kChunkLocal;
  kvstore::ChunkKey record_key;
  bool neighbour_fallback = false;
  // first_position: `source` reads the chunk's first-position record
  // (context kNeighbours, record_key its key); first_position_miss: one was
  // looked for and not found (store-back computes it).
  bool first_position = false;
  bool first_position_miss = false;
  int64_t chunk_begin = 0;  // the chunk's first row in this piece (raw prompts)
  std::unique_ptr<blend::KvSource> source;  // null: computed fresh
  blend::StoreKvSource* store = nullptr;    // the store stream under source
  std::vector<int32_t> whole;  // a raw match's whole chunk when it holds rows of it only
  bool stored = false;   // a stored record was found when the request was resolved
  bool failed = false;   // its record failed mid-blend: a miss from then on
  bool covered = false;  // inside the stored exact prefix (no source of its own)
  bool released = false;  // stored, but closed: the strategy does not read it
};

// Segment owners in BlendLayout::seg_piece besides a piece index.
inline constexpr int kSystemSegment = -1;  // prefix (BOS + leading fresh pieces)
inline constexpr int kExactSegment = -2;   // the stored exact prefix

// BlendLayout: the pieces mapped to Blender segments. segs point into
// `prefix`, `exact_tokens` and the pieces' tokens and sources.
struct BlendLayout {
  std::vector<int32_t> prefix;  // optional BOS + the leading fresh pieces
  size_t first = 0;             // the first piece after the prefix
  std::vector<blend::BlendSegment> segs;
  std::vector<int> seg_piece;   // owner of segs[i]: a piece index or k*Segment
  std::vector<Span> spans;      // span i: the prefix (when any), then pieces[first..]
  int64_t T = 0;                // prompt tokens
  // traffic: the key namespace of the request's own KV (documents,
  // passages, exact-prefix blocks): the model's fingerprint salted by the
  // request's cache_salt (kvstore::SaltedFingerprint).
  kvstore::Fingerprint traffic{};
  // The stored exact prefix in front (prefix_cache.h), when one was found.
  std::unique_ptr<blend::PrefixKvSource> exact;
  std::vector<int32_t> exact_tokens;
  bool exact_failed = false;    // its load failed once: not used again in this call

  // SpanOf: the span of piece `pi`.
  uint32_t SpanOf(size_t pi) const {
    return static_cast<uint32_t>((prefix.empty() ? 0 : 1) + (pi - first));
  }
  // Tokens: the whole prompt (prefix, then pieces[first..]).
  std::vector<int32_t> Tokens(const std::vector<Piece>& pieces) const {
    std::vector<int32_t> t = prefix;
    for (size_t i = first; i < pieces.size(); ++i) {
      t.insert(t.end(), pieces[i].tokens.begin(), pieces[i].tokens.end());
    }
    return t;
  }
};

// BuildSegs: layout->segs / seg_piece from layout->prefix and the pieces
// (prefix segment, chunks and fresh pieces, the last piece the query).
inline void BuildSegs(const std::vector<Piece>& pieces, BlendLayout* layout) {
  layout->segs.clear();
  layout->seg_piece.clear();
  if (!layout->prefix.empty()) {
    layout->segs.push_back(
        {blend::SegmentKind::kPrefix, absl::MakeConstSpan(layout->prefix), nullptr});
    layout->seg_piece.push_back(kSystemSegment);
  }
  for (size_t i = layout->first; i < pieces.size(); ++i) {
    const bool query = i + 1 == pieces.size();
    layout->segs.push_back({query ? blend::SegmentKind::kQuery : blend::SegmentKind::kChunk,
                            absl::MakeConstSpan(pieces[i].tokens), pieces[i].source.get()});
    layout->seg_piece.push_back(static_cast<int>(i));
  }
}

}  // namespace ragkv::pipeline::internal

#endif  // RAGKV_PIPELINE_INTERNAL_LAYOUT_H_
