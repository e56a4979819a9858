// blend_service.h: BlendServiceImpl, ragkv.v1.BlendService: runs the
// request's prompt through the request pipeline (pipeline/pipeline.h) on
// the executor and streams the fused KV layer by layer (header, layers,
// summary). See docs/protocol.md for the segment-to-Blender mapping.
// Thread safety: stateless; gRPC calls it concurrently.
#ifndef RAGKV_SERVICES_BLEND_SERVICE_H_
#define RAGKV_SERVICES_BLEND_SERVICE_H_

#include <cstdint>

#include "ragkv/v1/blend.grpc.pb.h"
#include "services/service_context.h"

namespace ragkv::services {

class BlendServiceImpl final : public v1::BlendService::CallbackService {
 public:
  explicit BlendServiceImpl(const ServiceContext* ctx) : ctx_(ctx) {}

  grpc::ServerWriteReactor<v1::BlendResponse>* Blend(grpc::CallbackServerContext* c,
                                                     const v1::BlendRequest* req) override;
  grpc::ServerWriteReactor<v1::BlendResponse>* RetrieveAndBlend(
      grpc::CallbackServerContext* c, const v1::RetrieveAndBlendRequest* req) override;

 private:
  const ServiceContext* ctx_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_BLEND_SERVICE_H_
