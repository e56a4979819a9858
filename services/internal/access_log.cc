#include "services/internal/access_log.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message_lite.h>
#include <grpcpp/grpcpp.h>

#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/log.h"
#include "connector/wire.h"

namespace ragkv::services::internal {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;
using grpc::experimental::ServerRpcInfo;
std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%016x", rng());
}


// MethodLabel: the RPC's method as it may appear in a metric label or a log
// line: a method of a service compiled into this binary (ragkv.v1, health,
// reflection), else "unknown" (a caller's path never becomes a series).
std::string MethodLabel(const std::string& path) {
  const size_t slash = path.find('/', 1);
  if (path.size() < 4 || path[0] != '/' || slash == std::string::npos) return "unknown";
  const google::protobuf::ServiceDescriptor* svc =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          path.substr(1, slash - 1));
  if (svc == nullptr || svc->FindMethodByName(path.substr(slash + 1)) == nullptr) return "unknown";
  return path;
}

// Recv: what a received message is, by the hook's contract only parsed
// objects: ragkv's unary / server-streaming methods take protobuf messages,
// its client streams raw grpc::ByteBuffers (grpc_util.h CollectReader);
// other services (health, reflection) are not counted.
enum class Recv { kUnknown, kProto, kBytes };

Recv RecvKind(ServerRpcInfo* info) {
  if (std::string(info->method()).rfind("/ragkv.", 0) != 0) return Recv::kUnknown;
  switch (info->type()) {
    case ServerRpcInfo::Type::UNARY:
    case ServerRpcInfo::Type::SERVER_STREAMING: return Recv::kProto;
    case ServerRpcInfo::Type::CLIENT_STREAMING: return Recv::kBytes;
    default: return Recv::kUnknown;
  }
}

class AccessLog : public grpc::experimental::Interceptor {
 public:
  AccessLog(ServerRpcInfo* info, Metrics* metrics, bool log_lines)
      : info_(info), method_(MethodLabel(info->method())), recv_(RecvKind(info)), metrics_(metrics),
        log_lines_(log_lines), t0_(Clock::now()) {}

  void Intercept(InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      TakeRequestId(m->GetRecvInitialMetadata());
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      m->GetSendInitialMetadata()->emplace(kRequestIdKey, id());
    }
    if (recv_ != Recv::kUnknown &&
        m->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      if (const void* msg = m->GetRecvMessage(); msg != nullptr) {
        bytes_in_ += recv_ == Recv::kProto
                         ? static_cast<const google::protobuf::MessageLite*>(msg)->ByteSizeLong()
                         : static_cast<const grpc::ByteBuffer*>(msg)->Length();
      }
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      if (const grpc::ByteBuffer* b = m->GetSerializedSendMessage(); b != nullptr) {
        bytes_out_ += b->Length();
      }
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) Finish(m);
    m->Proceed();
  }

 private:
  const std::string& id() {
    if (id_.empty()) id_ = NewRequestId();
    return id_;
  }

  // TakeRequestId: the client's id when sane, else a fresh one; either way
  // the handler then finds exactly this id under kRequestIdKey in its
  // ServerContext's client metadata (RequestIdOf), which is this map.
  void TakeRequestId(std::multimap<grpc::string_ref, grpc::string_ref>* md) {
    auto it = md->find(kRequestIdKey);
    if (it != md->end()) id_ = SaneRequestId(std::string_view(it->second.data(), it->second.size()));
    id();  // fresh when the client's was missing or not sane
    md->erase(kRequestIdKey);
    md->emplace(grpc::string_ref(kRequestIdKey), grpc::string_ref(id_));  // id_ never changes now
  }

  void Finish(InterceptorBatchMethods* m) {
    const grpc::Status st = m->GetSendStatus();
    if (!st.ok()) {
      m->ModifySendStatus(grpc::Status(
          st.error_code(), absl::StrFormat("%s [request_id=%s]", st.error_message(), id()),
          st.error_details()));
    }
    const double ms = MsSince(t0_);
    // grpc::StatusCode and absl::StatusCode share their values and names.
    const std::string code =
        absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code()));
    metrics_->Observe("ragkv_rpc_ms", absl::StrFormat("method=\"%s\",code=\"%s\"", method_, code),
                      ms);
    if (log_lines_) {
      ScopedRequestId none("");  // the line names its id itself (Finish may run in the handler)
      RAGKV_LOG(INFO) << absl::StrFormat(
          "rpc method=%s peer=%s code=%s ms=%.3f bytes_in=%d bytes_out=%d request_id=%s", method_,
          info_->server_context() ? info_->server_context()->peer() : std::string("-"), code, ms,
          bytes_in_, bytes_out_, id());
    }
  }

  ServerRpcInfo* info_;
  std::string method_;
  Recv recv_;
  Metrics* metrics_;
  bool log_lines_;
  Clock::time_point t0_;
  std::string id_;
  size_t bytes_in_ = 0;
  size_t bytes_out_ = 0;
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  Factory(Metrics* metrics, bool log_lines) : metrics_(metrics), log_lines_(log_lines) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    return new AccessLog(info, metrics_, log_lines_);
  }

 private:
  Metrics* metrics_;
  bool log_lines_;
};

}  // namespace

std::string RequestIdOf(const grpc::ServerContextBase& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kRequestIdKey);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

std::string SaneRequestId(std::string_view id) {
  return wire::IsValidRequestId(id) ? std::string(id) : std::string();
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewAccessLogFactory(
    Metrics* metrics, bool log_lines) {
  return std::make_unique<Factory>(metrics, log_lines);
}

}  // namespace ragkv::services::internal
