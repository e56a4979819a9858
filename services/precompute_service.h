// precompute_service.h: PrecomputeServiceImpl, ragkv.v1.PrecomputeService
// over JobManager (precompute_job.h). Jobs run on their own threads; the
// RPCs only start, read, watch (one JobWatchHub thread for every watch) and
// cancel them.
// Thread safety: stateless; gRPC calls it concurrently.
#ifndef RAGKV_SERVICES_PRECOMPUTE_SERVICE_H_
#define RAGKV_SERVICES_PRECOMPUTE_SERVICE_H_

#include "ragkv/v1/precompute.grpc.pb.h"
#include "services/service_context.h"

namespace ragkv::services {
namespace internal {
class JobWatchHub;  // private (services/internal/job_watch_hub.h); not owned here
}

class PrecomputeServiceImpl final : public v1::PrecomputeService::CallbackService {
 public:
  // hub: serves WatchJob streams (owned by the sidecar; null: refused).
  PrecomputeServiceImpl(const ServiceContext* ctx, internal::JobWatchHub* hub)
      : ctx_(ctx), hub_(hub) {}

  grpc::ServerUnaryReactor* StartJob(grpc::CallbackServerContext* c,
                                     const v1::StartJobRequest* req, v1::Job* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* c, const v1::GetJobRequest* req,
                                   v1::Job* resp) override;
  grpc::ServerWriteReactor<v1::Job>* WatchJob(grpc::CallbackServerContext* c,
                                              const v1::WatchJobRequest* req) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* c,
                                      const v1::CancelJobRequest* req, v1::Job* resp) override;

 private:
  const ServiceContext* ctx_;
  internal::JobWatchHub* hub_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_PRECOMPUTE_SERVICE_H_
