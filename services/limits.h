// limits.h: the request limits of the ragkv.v1 services, part of the
// contract (stated in the .proto comments and docs/protocol.md "Limits"). A
// request over one is refused with INVALID_ARGUMENT or RESOURCE_EXHAUSTED
// naming the field (services/internal/validate.h checks them).
#ifndef RAGKV_SERVICES_LIMITS_H_
#define RAGKV_SERVICES_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "connector/wire.h"

namespace ragkv::services {

inline constexpr int kMaxKeysPerCall = 4096;         // Lookup/Contains/DeleteChunks
inline constexpr int kMaxChunkIdsPerCall = 4096;     // GetChunks, Generate.chunk_ids
inline constexpr int kMaxBlendSegments = 4096;       // Blend segments
inline constexpr uint32_t kMaxSearchTopK = 1024;     // Search.k
inline constexpr uint32_t kMaxRetrieveTopK = wire::kMaxRetrieveTopK;  // RetrieveAndBlend.k, Generate.k
inline constexpr uint32_t kMaxGenerateNewTokens = 1024;
inline constexpr size_t kMaxDocIdBytes = 1024;       // doc_id of Ingest/DeleteDocument
inline constexpr size_t kMaxIngestDocs = 100000;     // per IngestDocuments stream
inline constexpr size_t kMaxChunkDocuments = 1024;   // per ChunkDocuments call
inline constexpr size_t kMaxIngestTextBytes = size_t{1} << 30;  // per IngestDocuments stream
inline constexpr int kMaxJobPaths = 1024;            // StartJob corpus paths
inline constexpr size_t kMaxPathBytes = 4096;        // one StartJob corpus path
inline constexpr uint32_t kMaxJobWorkers = 64;       // StartJob.workers
inline constexpr uint32_t kMaxJobNeighbours = 16;    // StartJob.corpus.neighbours

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_LIMITS_H_
