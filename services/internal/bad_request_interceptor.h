// bad_request_interceptor.h: a gRPC server interceptor that turns gRPC's
// answer to an undecodable request of a unary or server-streaming method
// (UNIMPLEMENTED with an empty message: the callback API fails the call
// before any handler runs) into INVALID_ARGUMENT naming the method. The
// client streams parse their messages themselves (CollectReader).
// Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_BAD_REQUEST_INTERCEPTOR_H_
#define RAGKV_SERVICES_INTERNAL_BAD_REQUEST_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

namespace ragkv::services::internal {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewBadRequestInterceptorFactory();

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_BAD_REQUEST_INTERCEPTOR_H_
