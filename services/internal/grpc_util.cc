#include "services/internal/grpc_util.h"

namespace ragkv::services::internal {

absl::Status CheckBearer(const grpc::ServerContextBase& ctx, const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  const std::string_view got(it->second.data(), it->second.size());
  const std::string_view prefix = "Bearer ";
  if (got.size() != prefix.size() + token.size() || got.substr(0, prefix.size()) != prefix) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  unsigned diff = 0;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(got[prefix.size() + i]) ^
            static_cast<unsigned char>(token[i]);
  }
  if (diff != 0) return absl::UnauthenticatedError("invalid bearer token");
  return absl::OkStatus();
}

}  // namespace ragkv::services::internal
