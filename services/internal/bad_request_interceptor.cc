#include "services/internal/bad_request_interceptor.h"

#include <string>

namespace ragkv::services::internal {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;
using grpc::experimental::ServerRpcInfo;

class BadRequestInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BadRequestInterceptor(ServerRpcInfo* info) : method_(info->method()) {}

  void Intercept(InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        m->GetRecvMessage() == nullptr) {
      undecodable_ = true;
    }
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) && undecodable_ &&
        m->GetSendStatus().error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      m->ModifySendStatus(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          "the request of " + method_ + " is not a valid protobuf message of its type"));
    }
    m->Proceed();
  }

 private:
  std::string method_;
  bool undecodable_ = false;
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    if (info->type() != ServerRpcInfo::Type::UNARY &&
        info->type() != ServerRpcInfo::Type::SERVER_STREAMING) {
      return nullptr;
    }
    return new BadRequestInterceptor(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewBadRequestInterceptorFactory() {
  return std::make_unique<Factory>();
}

}  // namespace ragkv::services::internal
