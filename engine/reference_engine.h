// reference_engine.h: ReferenceEngine, a small generation engine that uses the sidecar
// the way a production engine would: retrieve top-k chunks, get the fused
// context KV through the connector (Blend RPC, streamed into a KVSink that
// imports each layer into the engine's own KVCache), prefill only the query
// tokens on top, and decode greedily. TTFT is measured end to end with its
// breakdown (retrieve, fetch, blend, query prefill).
//
// Modes (v1::BlendMode): FULL_PREFILL prefills context + query locally (the
// baseline: chunk tokens come from GetChunks); PREFIX_CACHING, FULL_REUSE
// and CACHEBLEND(r) call Blend with that strategy.
//
// Wire dtype (Options::kv_wire_dtype): the engine asks the sidecar for the
// fused KV in f16 by default (half the bytes of f32 on the wire) and
// converts to f32 on import (kernels::Convert, vectorized); f32 is exact
// (bit-equal to the sidecar's cache), bf16 is accepted too.
//
// No double work: the sidecar's Blend always computes the query rows' K/V
// (every strategy recomputes the query suffix), so the engine keeps every
// fused row except the last query token's and runs the model forward for
// that one token only (DecodeStep) to get the first logits. The first
// token's logits are those of the same forward the old path ran (query
// prefilled on the imported context), up to float summation order.
//
// Thread safety: Generate may run concurrently (each call has its own cache
// and workspace); the model and client are shared, thread-safe objects.
#ifndef RAGKV_ENGINE_REFERENCE_ENGINE_H_
#define RAGKV_ENGINE_REFERENCE_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "connector/client.h"
#include "ragkv/v1/engine.pb.h"

namespace ragkv::model {
class Model;
class Tokenizer;
}  // namespace ragkv::model

namespace ragkv::engine {

class ReferenceEngine {
 public:
  struct Options {
    const model::Model* model = nullptr;          // required, not owned
    const model::Tokenizer* tokenizer = nullptr;  // required, not owned
    Client* sidecar = nullptr;                    // required, not owned
    // Fused KV element type requested from the sidecar: DTYPE_F16 (default),
    // DTYPE_BF16 or DTYPE_F32 (exact).
    v1::DType kv_wire_dtype = v1::DTYPE_F16;
    // true (default): reuse the sidecar's query rows, forward only the last
    // query token. false: drop the query rows and prefill the whole query
    // locally (the former path; kept to compare against).
    bool reuse_query_kv = true;
  };
  static absl::StatusOr<std::unique_ptr<ReferenceEngine>> Create(Options options);

  // Generate: see engine.proto. InvalidArgument for bad requests; errors of
  // the sidecar calls are returned as is. `request_id`, when set, is the id
  // the sidecar calls carry (the caller's, so one id ties the Generate and
  // its inner Blend in the sidecar's log); else the connector makes one.
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& request,
                                                const std::string& request_id = "") const;
  // Context: the model's context length (prompt + new tokens fit in it).
  int Context() const;

 private:
  explicit ReferenceEngine(Options o) : o_(o) {}
  Options o_;
};

}  // namespace ragkv::engine

#endif  // RAGKV_ENGINE_REFERENCE_ENGINE_H_
