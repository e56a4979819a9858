#include "connector/wire.h"

#include <xxhash.h>

#include <cstring>

#include "absl/strings/str_format.h"

namespace ragkv::wire {

uint64_t LayerChecksum(std::string_view k, std::string_view v) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, k.data(), k.size());
  XXH3_64bits_update(st, v.data(), v.size());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

WireDType FromProto(v1::DType d) {
  switch (d) {
    case v1::DTYPE_F16: return WireDType::kF16;
    case v1::DTYPE_BF16: return WireDType::kBF16;
    default: return WireDType::kF32;
  }
}

FailedLoadInfo FromProto(const v1::FailedLoad& f) {
  return {f.span(), f.chunk_id(), f.layer(), f.reason()};
}

void ToProto(const FailedLoadInfo& f, v1::FailedLoad* out) {
  out->set_span(f.span);
  out->set_chunk_id(f.chunk_id);
  out->set_layer(f.layer);
  out->set_reason(f.reason);
}

v1::DType ToProto(WireDType t) {
  switch (t) {
    case WireDType::kF16: return v1::DTYPE_F16;
    case WireDType::kBF16: return v1::DTYPE_BF16;
    case WireDType::kF32: break;
  }
  return v1::DTYPE_F32;
}

v1::DType ToProto(kernels::DType d) {
  switch (d) {
    case kernels::DType::kF32: return v1::DTYPE_F32;
    case kernels::DType::kF16: return v1::DTYPE_F16;
    case kernels::DType::kBF16: return v1::DTYPE_BF16;
    case kernels::DType::kI8: break;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::StatusOr<kernels::DType> KernelDTypeFromProto(v1::DType d) {
  switch (d) {
    case v1::DTYPE_F32: return kernels::DType::kF32;
    case v1::DTYPE_F16: return kernels::DType::kF16;
    case v1::DTYPE_BF16: return kernels::DType::kBF16;
    default: return absl::InvalidArgumentError(absl::StrFormat("unsupported dtype %d", d));
  }
}

absl::Status CheckFingerprint(std::string_view raw) {
  if (raw.size() != kFingerprintBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("model_fingerprint must be %d bytes, got %d",
                                                      kFingerprintBytes, raw.size()));
  }
  return absl::OkStatus();
}

std::string FingerprintBytes(const Fingerprint& fp) {
  return std::string(reinterpret_cast<const char*>(fp.data()), fp.size());
}

absl::StatusOr<Fingerprint> FingerprintFromBytes(std::string_view raw) {
  if (absl::Status s = CheckFingerprint(raw); !s.ok()) return s;
  Fingerprint fp{};
  std::memcpy(fp.data(), raw.data(), fp.size());
  return fp;
}

bool IsValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace ragkv::wire
