// engine_service.h: EngineServiceImpl, ragkv.v1.EngineService over
// ReferenceEngine. Generation runs on the engine's own bounded executor
// (never the sidecar's: the engine calls back into the sidecar, and a task
// must not wait on tasks of its own pool).
#ifndef RAGKV_SERVICES_ENGINE_SERVICE_H_
#define RAGKV_SERVICES_ENGINE_SERVICE_H_

#include <atomic>
#include <string>

#include "ragkv/v1/engine.grpc.pb.h"
#include "engine/reference_engine.h"
#include "base/executor.h"
#include "services/metrics.h"

namespace ragkv::services {
namespace internal {
class CallGate;  // private (services/internal/call_gate.h); not owned here
}

class EngineServiceImpl final : public v1::EngineService::CallbackService {
 public:
  // All pointers are not owned and must outlive the service.
  EngineServiceImpl(const engine::ReferenceEngine* engine, BoundedExecutor* executor, Metrics* metrics,
                    internal::CallGate* gate)
      : engine_(engine), executor_(executor), metrics_(metrics), gate_(gate) {}

  // set_engine: the engine is created after the server has a port.
  void set_engine(const engine::ReferenceEngine* engine) { engine_ = engine; }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* c,
                                     const v1::GenerateRequest* req,
                                     v1::GenerateResponse* resp) override;

 private:
  std::atomic<const engine::ReferenceEngine*> engine_;
  BoundedExecutor* executor_;
  Metrics* metrics_;
  internal::CallGate* gate_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_ENGINE_SERVICE_H_
