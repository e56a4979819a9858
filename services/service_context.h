// service_context.h: ServiceContext, what every gRPC service implementation
// of the sidecar shares: the bounded executor, metrics, the call gate (auth,
// rate and in-flight limits) and
// non-owning pointers to the libraries it fronts. Owned by Sidecar
// (sidecar.h), which outlives every service. A null backend pointer means
// the sidecar runs without it; the services that need it then answer
// FAILED_PRECONDITION / UNIMPLEMENTED.
#ifndef RAGKV_SERVICES_SERVICE_CONTEXT_H_
#define RAGKV_SERVICES_SERVICE_CONTEXT_H_

#include <string>

#include "retrieval/retriever.h"
#include "base/executor.h"
#include "services/metrics.h"

namespace ragkv::kvstore {
class TieredStore;
}
namespace ragkv::model {
class Model;
class KVCachePool;
class Tokenizer;
}  // namespace ragkv::model
namespace ragkv::blend {
class Blender;
class LoadingController;
struct GateDecision;
}
namespace ragkv::retrieval {
class Retriever;
}
namespace ragkv::pipeline {
class Pipeline;
}

namespace ragkv::services {

class JobManager;  // services/precompute_job.h
namespace internal {
class CallGate;      // services/internal/call_gate.h
class ByteBudget;    // services/internal/byte_budget.h
struct PutChunkExpect;  // services/internal/validate.h
}

struct ServiceContext {
  BoundedExecutor* executor = nullptr;  // required
  Metrics* metrics = nullptr;           // required
  internal::CallGate* gate = nullptr;   // required: every RPC is admitted by it
  kvstore::TieredStore* store = nullptr;
  const model::Model* model = nullptr;
  const model::Tokenizer* tokenizer = nullptr;
  const blend::Blender* blender = nullptr;
  blend::LoadingController* controller = nullptr;  // BLEND_MODE_AUTO
  retrieval::Retriever* retriever = nullptr;
  // The default mode of text queries (RetrievalSettings::search_mode).
  retrieval::SearchMode search_mode = retrieval::SearchMode::kHybrid;
  JobManager* jobs = nullptr;
  // PutChunk bounds: bytes one stream may declare (0: kvstore's limits),
  // the server-wide budget of bytes held by streams in flight, and the
  // served model's layout (null without a model).
  uint64_t max_put_chunk_bytes = 0;
  internal::ByteBudget* put_budget = nullptr;
  const internal::PutChunkExpect* put_expect = nullptr;
  // The request pipeline Blend and RetrieveAndBlend run (null: no model).
  const pipeline::Pipeline* pipeline = nullptr;
  // The served model's quality gate (null: no model, or no gate).
  const blend::GateDecision* quality_gate = nullptr;
  // The fused caches' memory, kept between blends (null: fresh each time).
  model::KVCachePool* cache_pool = nullptr;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_SERVICE_CONTEXT_H_
