#include "services/precompute_service.h"

#include <thread>

#include "base/status_macros.h"
#include "services/internal/grpc_util.h"
#include "services/internal/job_watch_hub.h"
#include "services/internal/validate.h"
#include "services/precompute_job.h"

namespace ragkv::services {
namespace {

absl::Status NeedJobs(const ServiceContext* ctx) {
  if (ctx->jobs == nullptr) return absl::FailedPreconditionError("precompute is not enabled");
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* PrecomputeServiceImpl::StartJob(grpc::CallbackServerContext* c,
                                                          const v1::StartJobRequest* req,
                                                          v1::Job* resp) {
  return internal::RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(internal::ValidateStartJobRequest(*req));
    RETURN_IF_ERROR(NeedJobs(ctx_));
    ASSIGN_OR_RETURN(std::string id,
                     ctx_->jobs->Start(req->corpus(), static_cast<int>(req->workers())));
    ASSIGN_OR_RETURN(*resp, ctx_->jobs->Get(id));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* PrecomputeServiceImpl::GetJob(grpc::CallbackServerContext* c,
                                                        const v1::GetJobRequest* req,
                                                        v1::Job* resp) {
  return internal::RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedJobs(ctx_));
    ASSIGN_OR_RETURN(*resp, ctx_->jobs->Get(req->job_id()));
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::Job>* PrecomputeServiceImpl::WatchJob(
    grpc::CallbackServerContext* c, const v1::WatchJobRequest* req) {
  // A watch is long-lived and mostly waits: the hub's one thread serves it
  // instead of an executor worker (which would starve short calls).
  auto* w = new internal::StreamWriter<v1::Job>();
  absl::StatusOr<internal::CallGate::Ticket> ticket = ctx_->gate->Admit(*c);
  if (!ticket.ok()) {
    w->Close(internal::ToGrpc(ticket.status()));
    return w;
  }
  if (absl::Status s = NeedJobs(ctx_); !s.ok() || hub_ == nullptr) {
    w->Close(internal::ToGrpc(s.ok() ? absl::FailedPreconditionError("no watch hub") : s));
    return w;
  }
  const absl::Duration interval =
      absl::Milliseconds(req->interval_ms() > 0 ? std::min<uint32_t>(req->interval_ms(), 3600000)
                                                : 500);
  hub_->Watch(w, req->job_id(), interval, std::move(*ticket));
  return w;
}

grpc::ServerUnaryReactor* PrecomputeServiceImpl::CancelJob(grpc::CallbackServerContext* c,
                                                           const v1::CancelJobRequest* req,
                                                           v1::Job* resp) {
  return internal::RunUnary(c, ctx_->executor, ctx_->gate, [this, req, resp]() -> absl::Status {
    RETURN_IF_ERROR(NeedJobs(ctx_));
    ASSIGN_OR_RETURN(*resp, ctx_->jobs->Cancel(req->job_id()));
    return absl::OkStatus();
  });
}

}  // namespace ragkv::services
