// bench_ttft_grpc.h: the real path of `ragkv bench ttft`: client ->
// EngineService.Generate of a Sidecar (the `ragkv serve` stack, in this
// process, on 127.0.0.1:<ephemeral>) -> the reference engine, which calls
// the sidecar's BlendService over gRPC (a second loopback hop), imports the
// streamed fused KV (f16 on the wire, the serve default) into its own cache
// (connector KVSink), keeps the sidecar's query rows and runs the last query
// token forward for the first token. TTFT is the client's wall time
// of one Generate with max_new_tokens = 1 (no decode step runs).
//
// The chunks reach the sidecar as a real deployment's do: one document per
// chunk through IngestDocuments (catalogue + index), and the KV the bench
// precomputed in-process stored through KVStoreService.PutChunk under the
// catalogue's key, so the in-process and gRPC rows blend identical tokens
// and identical cached KV.
//
// Thread safety: one GrpcTtftPath is used by one thread at a time.
#ifndef RAGKV_BENCH_SERVICES_BENCH_TTFT_GRPC_H_
#define RAGKV_BENCH_SERVICES_BENCH_TTFT_GRPC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/blender.h"
#include "blend/kv_source.h"
#include "connector/client.h"

namespace ragkv::services {

struct GrpcTtftOptions {
  std::string model_spec;   // what the sidecar loads (same as the bench's model)
  std::string tokenizer;    // empty: the model's own
  int max_seq_len = 0;
  int chunk_tokens = 512;   // retrieval chunker target (a document of at most
                            // this many tokens is one chunk)
  std::string data_dir;     // the sidecar's RocksDB / index directory
  // The sidecar's KV tiers (SidecarOptions::kv_tiers), e.g. {"ssd"} so every
  // read is served by the SSD tier (O_DIRECT, no promotion to RAM); empty =
  // {"ram"}. "redis" needs redis_url.
  std::vector<std::string> kv_tiers;
  std::string redis_url;
  // first_position_records: SidecarOptions::first_position_records, with
  // store-back on to write them (DrainStoreBack waits for it).
  bool first_position_records = false;
};

// CatalogueChunk: one ingested chunk as the sidecar's catalogue holds it.
struct CatalogueChunk {
  uint64_t chunk_id = 0;
  std::vector<int32_t> tokens;
  std::string kv_key;  // ChunkKey bytes under the sidecar's model
};

// GrpcOutcome: one Generate, timed at the client, with the engine's own
// breakdown (engine.proto TtftBreakdown).
struct GrpcOutcome {
  double ttft_s = 0;           // client wall time of Generate
  double engine_ttft_s = 0;    // the engine's TTFT (inside the server)
  double fetch_s = 0;          // sidecar fetch (store reads) or GetChunks
  double blend_s = 0;          // Blend RPC minus fetch: blend + stream + import
  double query_prefill_s = 0;  // the engine's prefill (query, or all rows for full prefill)
  int64_t context_tokens = 0;
  int64_t recomputed_tokens = 0;
  double ratio = 0;               // the CacheBlend ratio the sidecar applied
  std::string controller_reason;  // auto_ratio: the controller's why
  uint64_t wire_bytes = 0;     // fused KV streamed sidecar -> engine (f16)
};

class GrpcTtftPath {
 public:
  // Start: the sidecar (all services, engine in-process, metrics off) and a
  // client. Errors: those of Sidecar::Start.
  static absl::StatusOr<std::unique_ptr<GrpcTtftPath>> Start(const GrpcTtftOptions& options);
  ~GrpcTtftPath();

  std::string address() const;

  // Ingest: one document per text; returns each document's first chunk.
  // FailedPrecondition when a text does not fit one chunk, unless
  // `first_chunk_only` (longer texts: their first chunk is the one used).
  absl::StatusOr<std::vector<CatalogueChunk>> Ingest(const std::vector<std::string>& texts,
                                                     const std::string& doc_prefix,
                                                     bool first_chunk_only = false);
  // Put: stores `kv` (precomputed by the bench on an identical model) under
  // `chunk.kv_key`. FailedPrecondition when the key computed from the bench
  // model's fingerprint differs from the catalogue's (different models).
  absl::Status Put(const CatalogueChunk& chunk, const blend::ChunkKV& kv);

  // Generate: one request, chunks by id, the query as tokens. auto_ratio:
  // BLEND_MODE_AUTO (the sidecar's loading controller picks r; strategy and
  // ratio are ignored).
  absl::StatusOr<GrpcOutcome> Generate(const std::vector<uint64_t>& chunk_ids,
                                       const std::vector<int32_t>& query, blend::Strategy strategy,
                                       double ratio, bool auto_ratio = false);
  // DrainStoreBack: waits for the sidecar's store-back (Sidecar::DrainStoreBack).
  void DrainStoreBack() const;
  // data_dir: the sidecar's data directory (its SSD tier under kv/).
  const std::string& data_dir() const;
  // client: a connector client of the sidecar (owned by the path).
  Client* client() const;

 private:
  struct Impl;
  explicit GrpcTtftPath(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// SyntheticChunkText: `bytes` bytes of lower-case random words separated by
// single spaces (no sentence or paragraph marks), deterministic in `seed`.
// With the byte tokenizer of synthetic models it is exactly `bytes` tokens.
std::string SyntheticChunkText(int bytes, uint64_t seed);

}  // namespace ragkv::services

#endif  // RAGKV_BENCH_SERVICES_BENCH_TTFT_GRPC_H_
