#include "services/engine_service.h"

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "services/internal/access_log.h"
#include "services/internal/grpc_util.h"
#include "services/internal/validate.h"

namespace ragkv::services {

grpc::ServerUnaryReactor* EngineServiceImpl::Generate(grpc::CallbackServerContext* c,
                                                      const v1::GenerateRequest* req,
                                                      v1::GenerateResponse* resp) {
  return internal::RunUnary(c, executor_, gate_, [this, c, req, resp]() -> absl::Status {
    const engine::ReferenceEngine* engine = engine_.load();
    if (engine == nullptr) {
      return absl::FailedPreconditionError("the engine needs a model (--model)");
    }
    RETURN_IF_ERROR(internal::ValidateGenerateRequest(*req, /*vocab_size=*/0, engine->Context()));
    ASSIGN_OR_RETURN(*resp, engine->Generate(*req, internal::RequestIdOf(*c)));
    const std::string mode = absl::StrFormat("mode=\"%s\"", v1::BlendMode_Name(req->blend().mode()));
    metrics_->Observe("ragkv_engine_ttft_ms", mode, resp->ttft().ttft_ms());
    metrics_->Observe("ragkv_engine_query_prefill_ms", mode, resp->ttft().query_prefill_ms());
    return absl::OkStatus();
  });
}

}  // namespace ragkv::services
