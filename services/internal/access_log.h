// access_log.h: a gRPC server interceptor for every RPC: a request id (the
// client's `x-request-id` metadata when it is a sane token, else a fresh
// one) sent back as `x-request-id` initial metadata and appended to every
// error message ("[request_id=...]"), the RPC's latency in the
// ragkv_rpc_ms{method,code} histogram, and, unless switched off, one
// structured access log line per RPC (the work the call runs on the
// executor carries the id too: base/log.h ScopedRequestId):
//   rpc method=/ragkv.v1.BlendService/Blend peer=ipv4:127.0.0.1:5400
//       code=OK ms=12.3 bytes_in=210 bytes_out=81920 request_id=3f2a...
// Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_ACCESS_LOG_H_
#define RAGKV_SERVICES_INTERNAL_ACCESS_LOG_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>
#include <string_view>

#include "services/metrics.h"

namespace ragkv::services::internal {

// kRequestIdKey: the metadata key, both ways.
inline constexpr char kRequestIdKey[] = "x-request-id";

// SaneRequestId: `id` when it is 1..64 characters of [A-Za-z0-9._:-], else
// empty (a caller's id never reaches a log line unchecked).
std::string SaneRequestId(std::string_view id);

// RequestIdOf: the id the interceptor gave this call ("" without one).
std::string RequestIdOf(const grpc::ServerContextBase& ctx);

// NewAccessLogFactory: `metrics` must outlive the server; `log_lines`: write
// the access log line (the id and the histogram are always on).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewAccessLogFactory(
    Metrics* metrics, bool log_lines);

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_ACCESS_LOG_H_
