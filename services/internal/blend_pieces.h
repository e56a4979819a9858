// blend_pieces.h: resolving a Blend request's segments (or raw prompt)
// into pieces with their stored KV opened (services/blend_service.cc).
// Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_BLEND_PIECES_H_
#define RAGKV_SERVICES_INTERNAL_BLEND_PIECES_H_

#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "ragkv/v1/blend.pb.h"
#include "services/internal/blend_layout.h"
#include "services/service_context.h"

namespace ragkv::services::internal {

// ResolvePieces: resolves segment i into (*pieces)[i] (pieces is sized to
// segments); errors on a segment without source or tokens, or a chunk last;
// OUT_OF_RANGE as soon as the prompt outgrows the model's context (before
// the Blender sizes anything from it). Time spent opening stored records
// is added to *fetch_ms.
absl::Status ResolvePieces(const ServiceContext* ctx,
                           const google::protobuf::RepeatedPtrField<v1::Segment>& segments,
                           std::vector<Piece>* pieces, double* fetch_ms);

// ResolveRaw: the raw prompt cut into pieces: the catalogue's chunks found
// in it (Retriever::FindChunks; never inside the query tail) with their
// stored KV, and fresh pieces between them; the last piece holds the query.
absl::Status ResolveRaw(const ServiceContext* ctx, const v1::RawPrompt& raw,
                        std::vector<Piece>* pieces, double* fetch_ms);

// ReopenAll: every piece's stored record opened again, but the failed ones
// (the streams were consumed by a blend that failed on one load); a miss
// leaves a piece fresh.
absl::Status ReopenAll(const ServiceContext* ctx, std::vector<Piece>* pieces, double* fetch_ms);

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_BLEND_PIECES_H_
