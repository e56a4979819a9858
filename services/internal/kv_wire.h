// kv_wire.h: a stored chunk (kvstore's record) as the v1 wire messages that
// GetChunk streams: its KVHeader and one LayerKV per layer. Private to
// services/. The wire format's own definitions (layer checksum, dtype
// mapping, fingerprint bytes) are in connector/wire.h, their one home; this
// file only applies them to kvstore's types.
#ifndef RAGKV_SERVICES_INTERNAL_KV_WIRE_H_
#define RAGKV_SERVICES_INTERNAL_KV_WIRE_H_

#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "kvstore/kv_chunk.h"
#include "kvstore/tiered_store.h"
#include "ragkv/v1/kvstore.pb.h"

namespace ragkv::services::internal {

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
