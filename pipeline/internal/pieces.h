// pieces.h: resolving a prompt's segments (or raw token ids) into pieces
// with their stored KV opened (pipeline step 1). Private to pipeline/.
#ifndef RAGKV_PIPELINE_INTERNAL_PIECES_H_
#define RAGKV_PIPELINE_INTERNAL_PIECES_H_

#include <vector>

#include "absl/status/status.h"
#include "pipeline/internal/layout.h"
#include "pipeline/pipeline.h"

namespace ragkv::pipeline::internal {

// ResolveSegments: resolves segment i into (*pieces)[i] (pieces is sized to
// segments); errors on an empty segment or a chunk last; OUT_OF_RANGE as
// soon as the prompt outgrows the model's context (before the Blender sizes
// anything from it). Time spent opening stored records is added to
// *fetch_ms.
// `traffic`: the key namespace of the request's documents (the model's
// fingerprint, salted by the request's cache_salt).
absl::Status ResolveSegments(const Pipeline::Options& o, const kvstore::Fingerprint& traffic,
                             const std::vector<Segment>& segments, std::vector<Piece>* pieces,
                             double* fetch_ms);

// ResolveRaw: the raw prompt cut into pieces: the catalogue's chunks found
// in it (Retriever::FindChunks; never inside the query tail) with their
// stored KV, and fresh pieces between them; the last piece holds the query.
// The prompt's passages that no catalogue chunk overlaps become documents
// (keyed under `traffic`). NOT_FOUND when it has neither.
absl::Status ResolveRaw(const Pipeline::Options& o, const kvstore::Fingerprint& traffic,
                        const Prompt& prompt, std::vector<Piece>* pieces, double* fetch_ms);

// OpenFirstPosition: with Options::first_position_records, the first-
// position record of (*pieces)[layout.first] (a chunk's rows right after
// layout.prefix, when non-empty, whose plain record was found) replaces
// the plain record as its source when the store holds one: the KV of the
// piece's tokens (the rows of the chunk the prompt holds) computed right
// after exactly that prefix, keyed by blend::NeighbourKeyOf(layout.traffic,
// {prefix}, tokens). Returns whether it did (layout's segments must then be
// built again). Otherwise the piece
// keeps the plain record and is marked first_position_miss. A record that cannot be opened is a
// miss too (deleted unless the tier is unavailable), never the request's error. Cost: one more
// header lookup; a hit also drops the plain stream it replaces.
bool OpenFirstPosition(const Pipeline::Options& o, const BlendLayout& layout,
                       std::vector<Piece>* pieces, double* fetch_ms);

// ReopenAll: every piece's stored record opened again, but the failed ones
// (the streams were consumed by a blend that failed on one load); a miss
// leaves a piece fresh.
absl::Status ReopenAll(const Pipeline::Options& o, std::vector<Piece>* pieces, double* fetch_ms);

}  // namespace ragkv::pipeline::internal

#endif  // RAGKV_PIPELINE_INTERNAL_PIECES_H_
