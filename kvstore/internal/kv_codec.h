// kv_codec.h (internal): the payloads of the quantized KV codecs (int8, fp8,
// int4; docs/kv_format.md): for each of K then V, the tensor's parameters
// (scales, or int4's (step, lo) pairs) followed by its codes.
#ifndef RAGKV_KVSTORE_INTERNAL_KV_CODEC_H_
#define RAGKV_KVSTORE_INTERNAL_KV_CODEC_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "kernels/tensor.h"
#include "kvstore/kv_chunk.h"

namespace ragkv::kvstore::internal {

// QuantPayloadBytes: the uncompressed layer payload of h's (non-raw) codec.
uint64_t QuantPayloadBytes(const KvChunkHeader& h);

// EncodeQuantized: k and v f32 [H, T, D] contiguous into `out`
// (QuantPayloadBytes bytes). InvalidArgument for values the codec refuses.
absl::Status EncodeQuantized(const KvChunkHeader& h, const float* k, const float* v, char* out);

// DecodeQuantized: `payload` (QuantPayloadBytes bytes) into f32 views
// [H, T, D] with unit last stride.
absl::Status DecodeQuantized(const KvChunkHeader& h, std::string_view payload,
                             kernels::TensorView dst_k, kernels::TensorView dst_v);

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_INTERNAL_KV_CODEC_H_
