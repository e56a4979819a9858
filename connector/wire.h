// wire.h: the one home of the KV wire format's definitions, which both ends
// share (the engine-side client in connector/, the engines in engine/ and
// the sidecar in services/): the per-layer checksum of ragkv.v1.LayerKV, the
// mapping of ragkv.v1.DType to and from the engine-side WireDType and the
// runtime's kernels::DType, the model fingerprint's size and raw bytes, and
// the contract's limits. The format itself is documented in docs/protocol.md;
// the sidecar's request limits are in services/limits.h. Pure functions,
// thread-safe.
#ifndef RAGKV_CONNECTOR_WIRE_H_
#define RAGKV_CONNECTOR_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connector/kv_sink.h"
#include "kernels/tensor.h"
#include "ragkv/v1/blend.pb.h"
#include "ragkv/v1/common.pb.h"

namespace ragkv::wire {

// kMaxRetrieveTopK: the largest k of RetrieveAndBlend and Generate.
inline constexpr uint32_t kMaxRetrieveTopK = 64;
// kFingerprintBytes: size of a raw model_fingerprint.
inline constexpr size_t kFingerprintBytes = 16;
// Fingerprint: a model digest as the runtime holds it (the same type as
// kvstore::Fingerprint and model::Model::fingerprint()).
using Fingerprint = std::array<uint8_t, kFingerprintBytes>;

// LayerChecksum: XXH3-64 (seed 0) of k followed by v (LayerKV.checksum).
uint64_t LayerChecksum(std::string_view k, std::string_view v);

// FromProto: the WireDType of a v1::DType (f32 for an unset or unknown one,
// as the client reads a KVHeader); ToProto: the reverse.
WireDType FromProto(v1::DType d);
v1::DType ToProto(WireDType t);
// ToProto: the v1::DType of a KV element type (f32, f16, bf16);
// DTYPE_UNSPECIFIED for one the wire does not carry (i8).
v1::DType ToProto(kernels::DType d);
// KernelDTypeFromProto: the kernels::DType of a wire dtype, strictly (as the
// sidecar reads a request): InvalidArgument for DTYPE_UNSPECIFIED or an
// unknown value.
absl::StatusOr<kernels::DType> KernelDTypeFromProto(v1::DType d);
// The same for a failed load (BlendSummary / GenerateResponse.failed_loads).
FailedLoadInfo FromProto(const v1::FailedLoad& f);
void ToProto(const FailedLoadInfo& f, v1::FailedLoad* out);

// CheckFingerprint: InvalidArgument unless `raw` is kFingerprintBytes long.
absl::Status CheckFingerprint(std::string_view raw);
// FingerprintBytes: the fingerprint as it travels (model_fingerprint): its
// kFingerprintBytes raw bytes. FingerprintFromBytes: the reverse, with
// CheckFingerprint's error.
std::string FingerprintBytes(const Fingerprint& fp);
absl::StatusOr<Fingerprint> FingerprintFromBytes(std::string_view raw);

// IsValidRequestId: an x-request-id the server adopts (1-64 characters of
// A-Z a-z 0-9 . _ : -); it makes its own for any other.
bool IsValidRequestId(std::string_view id);

}  // namespace ragkv::wire

#endif  // RAGKV_CONNECTOR_WIRE_H_
