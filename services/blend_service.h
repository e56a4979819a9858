// blend_service.h: BlendServiceImpl, ragkv.v1.BlendService: resolves the
// request's segments (catalogue chunk ids -> tokens + a StoreKvSource over
// the tiered store; text/tokens -> fresh tokens), runs blend::Blender on the
// executor, and streams the fused KV layer by layer (header, layers,
// summary). See docs/protocol.md for segment-to-Blender mapping.
// Thread safety: stateless; gRPC calls it concurrently.
#ifndef RAGKV_SERVICES_BLEND_SERVICE_H_
#define RAGKV_SERVICES_BLEND_SERVICE_H_

#include <cstdint>

#include "ragkv/v1/blend.grpc.pb.h"
#include "services/service_context.h"

namespace ragkv::services {

// kDefaultRecomputeRatio: CacheBlend ratio when the request leaves it 0.
inline constexpr float kDefaultRecomputeRatio = 0.15f;

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
