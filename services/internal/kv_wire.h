// kv_wire.h: conversions between kvstore / kernels types and the v1 wire
// messages (dtype, layout, layer records). Private to services/. The
// definitions both ends share (checksum, fingerprint size) are in
// connector/wire.h.
#ifndef RAGKV_SERVICES_INTERNAL_KV_WIRE_H_
#define RAGKV_SERVICES_INTERNAL_KV_WIRE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/tiered_store.h"
#include "ragkv/v1/common.pb.h"
#include "ragkv/v1/kvstore.pb.h"

namespace ragkv::services::internal {

v1::DType ToWire(kernels::DType d);
absl::StatusOr<kernels::DType> FromWire(v1::DType d);

// FingerprintBytes / FingerprintFromBytes: the 16 raw bytes.
std::string FingerprintBytes(const kvstore::Fingerprint& fp);
absl::StatusOr<kvstore::Fingerprint> FingerprintFromBytes(std::string_view raw);

// WireDTypeOf: the dtype a stored chunk goes out as (its own for kRaw
// uncompressed records, f32 otherwise).
kernels::DType WireDTypeOf(const kvstore::KvChunkHeader& h);

// HeaderToWire: the KVHeader for a stored chunk.
v1::KVHeader HeaderToWire(const kvstore::KvChunkHeader& h);

// LayerToWire: one stored layer record as a LayerKV (checksum set).
absl::StatusOr<v1::LayerKV> LayerToWire(const kvstore::KvChunkHeader& h,
                                        const kvstore::LoadedLayer& layer);

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_KV_WIRE_H_
