// wire.h: the definitions both ends of the KV wire format share (the
// engine-side client in connector/ and the sidecar in services/): the
// per-layer checksum of ragkv.v1.LayerKV, the mapping between ragkv.v1.DType
// and WireDType, the model fingerprint's size and the contract's limits.
// The format itself is documented in docs/protocol.md.
#ifndef RAGKV_CONNECTOR_WIRE_H_
#define RAGKV_CONNECTOR_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "connector/kv_sink.h"
#include "ragkv/v1/blend.pb.h"
#include "ragkv/v1/common.pb.h"

namespace ragkv::wire {

// kMaxRetrieveTopK: the largest k of RetrieveAndBlend and Generate.
inline constexpr uint32_t kMaxRetrieveTopK = 64;
// kFingerprintBytes: size of a raw model_fingerprint.
inline constexpr size_t kFingerprintBytes = 16;

// LayerChecksum: XXH3-64 (seed 0) of k followed by v (LayerKV.checksum).
uint64_t LayerChecksum(std::string_view k, std::string_view v);

// FromProto: the WireDType of a v1::DType (f32 for an unset or unknown one,
// as the client reads a KVHeader); ToProto: the reverse.
WireDType FromProto(v1::DType d);
v1::DType ToProto(WireDType t);
// The same for a failed load (BlendSummary / GenerateResponse.failed_loads).
FailedLoadInfo FromProto(const v1::FailedLoad& f);
void ToProto(const FailedLoadInfo& f, v1::FailedLoad* out);

// CheckFingerprint: InvalidArgument unless `raw` is kFingerprintBytes long.
absl::Status CheckFingerprint(std::string_view raw);

// IsValidRequestId: an x-request-id the server adopts (1-64 characters of
// A-Z a-z 0-9 . _ : -); it makes its own for any other.
bool IsValidRequestId(std::string_view id);

}  // namespace ragkv::wire

#endif  // RAGKV_CONNECTOR_WIRE_H_
