#include "services/internal/kv_wire.h"

#include <string>

#include "base/status_macros.h"
#include "connector/wire.h"

namespace ragkv::services::internal {

kernels::DType WireDTypeOf(const kvstore::KvChunkHeader& h) {
  if (h.codec == kvstore::Codec::kRaw && h.compression == kvstore::Compression::kNone) {
    return h.dtype;
  }
  return kernels::DType::kF32;
}

v1::KVHeader HeaderToWire(const kvstore::KvChunkHeader& h) {
  v1::KVHeader out;
  out.set_key(std::string(h.key.AsBytes()));
  v1::KVLayout* l = out.mutable_layout();
  l->set_num_layers(h.num_layers);
  l->set_num_kv_heads(h.num_kv_heads);
  l->set_head_dim(h.head_dim);
  l->set_num_tokens(h.num_tokens());
  l->set_dtype(wire::ToProto(WireDTypeOf(h)));
  l->set_model_fingerprint(wire::FingerprintBytes(h.fingerprint));
  out.mutable_token_ids()->Assign(h.tokens.begin(), h.tokens.end());
  return out;
}

absl::StatusOr<v1::LayerKV> LayerToWire(const kvstore::KvChunkHeader& h,
                                        const kvstore::LoadedLayer& layer) {
  v1::LayerKV out;
  out.set_layer(layer.layer);
  const kernels::DType wd = WireDTypeOf(h);
  const size_t bytes = h.LayerElements() * kernels::DTypeSize(wd);
  if (wd == h.dtype && h.codec == kvstore::Codec::kRaw &&
      h.compression == kvstore::Compression::kNone) {
    ASSIGN_OR_RETURN(kvstore::RawLayer raw, layer.RawViews(h));
    out.set_k(static_cast<const char*>(raw.k.data), bytes);
    out.set_v(static_cast<const char*>(raw.v.data), bytes);
  } else {
    std::string* k = out.mutable_k();
    std::string* v = out.mutable_v();
    k->resize(bytes);
    v->resize(bytes);
    RETURN_IF_ERROR(layer.DecodeToF32(h, reinterpret_cast<float*>(k->data()),
                                      reinterpret_cast<float*>(v->data())));
  }
  out.set_checksum(wire::LayerChecksum(out.k(), out.v()));
  return out;
}

}  // namespace ragkv::services::internal
