// engine.h: ReferenceEngine, a small generation engine that uses the sidecar
// the way a production engine would: retrieve top-k chunks, get the fused
// context KV through the connector (Blend RPC, streamed into a KVSink that
// imports each layer into the engine's own KVCache), prefill only the query
// tokens on top, and decode greedily. TTFT is measured end to end with its
// breakdown (retrieve, fetch, blend, query prefill).
//
// Modes (v1::BlendMode): FULL_PREFILL prefills context + query locally (the
// baseline: chunk tokens come from GetChunks); PREFIX_CACHING, FULL_REUSE
// and CACHEBLEND(r) call Blend with that strategy. The engine always asks
// for f32 KV (exact) and drops the query rows of the fused cache before its
// own query prefill.
//
// Thread safety: Generate may run concurrently (each call has its own cache
// and workspace); the model and client are shared, thread-safe objects.
#ifndef RAGKV_SERVICES_ENGINE_H_
#define RAGKV_SERVICES_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "connector/client.h"
#include "ragkv/v1/engine.pb.h"

namespace ragkv::model {
class Model;
class Tokenizer;
}  // namespace ragkv::model

namespace ragkv::services {

class ReferenceEngine {
 public:
  struct Options {
    const model::Model* model = nullptr;          // required, not owned
    const model::Tokenizer* tokenizer = nullptr;  // required, not owned
    Client* sidecar = nullptr;                    // required, not owned
  };
  static absl::StatusOr<std::unique_ptr<ReferenceEngine>> Create(Options options);

  // Generate: see engine.proto. InvalidArgument for bad requests; errors of
  // the sidecar calls are returned as is.
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request) const;

 private:
  explicit ReferenceEngine(Options o) : o_(o) {}
  Options o_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_ENGINE_H_
