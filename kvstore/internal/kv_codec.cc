#include "kvstore/internal/kv_codec.h"

#include <cstring>
#include <vector>

#include "base/status_macros.h"
#include "kernels/quant.h"

namespace ragkv::kvstore::internal {
namespace {

using kernels::DType;
using kernels::Int4Axis;
using kernels::TensorView;

// Part: the byte sizes of one tensor's parameters and codes.
struct Part {
  uint64_t param_bytes = 0, code_bytes = 0;
  uint64_t bytes() const { return param_bytes + code_bytes; }
};

// Int4Axis of tensor `which` (0 K, 1 V): keys per channel along the tokens,
// values per token along the channels (KIVI).
Int4Axis AxisOf(int which) { return which == 0 ? Int4Axis::kRows : Int4Axis::kChannels; }

Part PartOf(const KvChunkHeader& h, int which) {
  const uint64_t H = h.num_kv_heads, T = h.num_tokens(), D = h.head_dim, n = H * T * D;
  switch (h.codec) {
    case Codec::kInt8PerChannel: return {H * D * sizeof(float), n};
    case Codec::kFp8E4M3PerHead: return {H * sizeof(float), n};
    case Codec::kInt4Grouped: {
      const int64_t pairs = kernels::Int4ParamCount(H, T, D, AxisOf(which));
      return {static_cast<uint64_t>(pairs) * 2 * sizeof(uint16_t), (n + 1) / 2};
    }
    case Codec::kRaw: break;
  }
  return {};
}

absl::Status EncodePart(const KvChunkHeader& h, int which, const float* x, char* out) {
  const Part part = PartOf(h, which);
  const TensorView xv = TensorView::Contiguous(
      x, DType::kF32, {int64_t{h.num_kv_heads}, int64_t{h.num_tokens()}, int64_t{h.head_dim}});
  char* codes = out + part.param_bytes;
  // Parameters go through an aligned buffer: payload offsets need not be.
  switch (h.codec) {
    case Codec::kInt4Grouped: {
      std::vector<uint16_t> params(part.param_bytes / sizeof(uint16_t));
      RETURN_IF_ERROR(kernels::QuantizeInt4Grouped(xv, AxisOf(which),
                                                   reinterpret_cast<uint8_t*>(codes), params.data()));
      std::memcpy(out, params.data(), part.param_bytes);
      return absl::OkStatus();
    }
    case Codec::kInt8PerChannel:
    case Codec::kFp8E4M3PerHead: {
      std::vector<float> scales(part.param_bytes / sizeof(float));
      RETURN_IF_ERROR(h.codec == Codec::kInt8PerChannel
                          ? kernels::QuantizeInt8PerChannel(xv, reinterpret_cast<int8_t*>(codes),
                                                            scales.data())
                          : kernels::QuantizeFp8E4M3PerGroup(xv, reinterpret_cast<uint8_t*>(codes),
                                                             scales.data()));
      std::memcpy(out, scales.data(), part.param_bytes);
      return absl::OkStatus();
    }
    case Codec::kRaw: break;
  }
  return absl::InternalError("EncodeQuantized: not a quantized codec");
}

absl::Status DecodePart(const KvChunkHeader& h, int which, const char* in, TensorView out) {
  const Part part = PartOf(h, which);
  const char* codes = in + part.param_bytes;
  switch (h.codec) {
    case Codec::kInt4Grouped: {
      std::vector<uint16_t> params(part.param_bytes / sizeof(uint16_t));
      std::memcpy(params.data(), in, part.param_bytes);
      return kernels::DequantizeInt4Grouped(reinterpret_cast<const uint8_t*>(codes), params.data(),
                                            AxisOf(which), out);
    }
    case Codec::kInt8PerChannel:
    case Codec::kFp8E4M3PerHead: {
      std::vector<float> scales(part.param_bytes / sizeof(float));
      std::memcpy(scales.data(), in, part.param_bytes);
      return h.codec == Codec::kInt8PerChannel
                 ? kernels::DequantizeInt8PerChannel(reinterpret_cast<const int8_t*>(codes),
                                                     scales.data(), out)
                 : kernels::DequantizeFp8E4M3PerGroup(reinterpret_cast<const uint8_t*>(codes),
                                                      scales.data(), out);
    }
    case Codec::kRaw: break;
  }
  return absl::InternalError("DecodeQuantized: not a quantized codec");
}

}  // namespace

uint64_t QuantPayloadBytes(const KvChunkHeader& h) { return PartOf(h, 0).bytes() + PartOf(h, 1).bytes(); }

absl::Status EncodeQuantized(const KvChunkHeader& h, const float* k, const float* v, char* out) {
  RETURN_IF_ERROR(EncodePart(h, 0, k, out));
  return EncodePart(h, 1, v, out + PartOf(h, 0).bytes());
}

absl::Status DecodeQuantized(const KvChunkHeader& h, std::string_view payload, TensorView dst_k,
                             TensorView dst_v) {
  if (payload.size() != QuantPayloadBytes(h)) {
    return absl::DataLossError("kv layer record: quantized payload has the wrong size");
  }
  RETURN_IF_ERROR(DecodePart(h, 0, payload.data(), dst_k));
  return DecodePart(h, 1, payload.data() + PartOf(h, 0).bytes(), dst_v);
}

}  // namespace ragkv::kvstore::internal
