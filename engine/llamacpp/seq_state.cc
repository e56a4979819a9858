#include "engine/llamacpp/seq_state.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/convert.h"

namespace ragkv::engine::llamacpp {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  template <typename T>
  absl::StatusOr<T> Get() {
    if (b_.size() - pos_ < sizeof(T) || pos_ > b_.size()) {
      return absl::InvalidArgumentError("llama.cpp sequence state: truncated");
    }
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  absl::Status Skip(uint64_t n) {
    if (n > b_.size() - pos_) return absl::InvalidArgumentError("llama.cpp sequence state: truncated");
    pos_ += n;
    return absl::OkStatus();
  }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

size_t TypeBytes(int32_t type) { return type == kGgmlF32 ? 4 : 2; }

absl::Status CheckType(int32_t type, const char* what) {
  if (type == kGgmlF32 || type == kGgmlF16) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrFormat(
      "llama.cpp caches %s as ggml type %d; ragkv writes F32 or F16 caches only", what, type));
}

// AppendElement: one f32 value in `type`.
void AppendElement(std::string* out, int32_t type, float x) {
  if (type == kGgmlF32) {
    Put(out, x);
  } else {
    Put(out, kernels::FloatToHalf(x));
  }
}

}  // namespace

absl::StatusOr<SeqStateLayout> ParseSeqStateLayout(std::string_view blob) {
  Reader r(blob);
  ASSIGN_OR_RETURN(uint32_t magic, r.Get<uint32_t>());
  if (magic != kSeqStateMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "not a llama.cpp sequence state of the pinned version (magic %08x)", magic));
  }
  RETURN_IF_ERROR(r.Get<int32_t>().status());  // the writer's seq id
  ASSIGN_OR_RETURN(uint32_t n_stream, r.Get<uint32_t>());
  if (n_stream != 1) {
    return absl::UnimplementedError(absl::StrFormat(
        "llama.cpp context has %d KV streams (kv_unified off); ragkv writes one", n_stream));
  }
  ASSIGN_OR_RETURN(uint32_t cells, r.Get<uint32_t>());
  if (cells == 0) return absl::InvalidArgumentError("llama.cpp sequence state holds no cell");
  for (uint32_t i = 0; i < cells; ++i) {
    RETURN_IF_ERROR(r.Get<int32_t>().status());
    ASSIGN_OR_RETURN(uint32_t n_seq, r.Get<uint32_t>());
    if (n_seq != 1) {
      return absl::UnimplementedError("llama.cpp cell with cell extensions or several sequences");
    }
    RETURN_IF_ERROR(r.Get<int32_t>().status());
  }
  SeqStateLayout l;
  ASSIGN_OR_RETURN(uint32_t v_trans, r.Get<uint32_t>());
  l.v_trans = v_trans != 0;
  ASSIGN_OR_RETURN(l.n_layer, r.Get<uint32_t>());
  for (uint32_t il = 0; il < l.n_layer; ++il) {
    ASSIGN_OR_RETURN(int32_t type, r.Get<int32_t>());
    ASSIGN_OR_RETURN(uint64_t row, r.Get<uint64_t>());
    RETURN_IF_ERROR(CheckType(type, "K"));
    if (il == 0) {
      l.k_type = type;
      l.n_embd_k = static_cast<uint32_t>(row / TypeBytes(type));
    } else if (type != l.k_type || row != l.n_embd_k * TypeBytes(type)) {
      return absl::UnimplementedError("llama.cpp K rows differ across layers");
    }
    RETURN_IF_ERROR(r.Skip(row * cells));
  }
  for (uint32_t il = 0; il < l.n_layer; ++il) {
    ASSIGN_OR_RETURN(int32_t type, r.Get<int32_t>());
    RETURN_IF_ERROR(CheckType(type, "V"));
    uint64_t embd = 0;
    if (l.v_trans) {
      ASSIGN_OR_RETURN(uint32_t el, r.Get<uint32_t>());
      ASSIGN_OR_RETURN(uint32_t n_embd_v, r.Get<uint32_t>());
      if (el != TypeBytes(type)) return absl::InvalidArgumentError("llama.cpp V element size");
      embd = n_embd_v;
      RETURN_IF_ERROR(r.Skip(uint64_t{el} * n_embd_v * cells));
    } else {
      ASSIGN_OR_RETURN(uint64_t row, r.Get<uint64_t>());
      embd = row / TypeBytes(type);
      RETURN_IF_ERROR(r.Skip(row * cells));
    }
    if (il == 0) {
      l.v_type = type;
      l.n_embd_v = static_cast<uint32_t>(embd);
    } else if (type != l.v_type || embd != l.n_embd_v) {
      return absl::UnimplementedError("llama.cpp V rows differ across layers");
    }
  }
  return l;
}

absl::StatusOr<std::string> EncodeSeqState(const SeqStateLayout& layout, int32_t seq_id,
                                           const SeqKv& kv) {
  const int64_t T = kv.num_tokens, H = kv.n_kv_heads, D = kv.head_dim;
  if (kv.k.size() != layout.n_layer || kv.v.size() != layout.n_layer || T <= 0 ||
      H * D != layout.n_embd_k || H * D != layout.n_embd_v) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV of %d layers x %d x %d does not fit llama.cpp's %d layers x K %d / V %d",
        kv.k.size(), H, D, layout.n_layer, layout.n_embd_k, layout.n_embd_v));
  }
  RETURN_IF_ERROR(CheckType(layout.k_type, "K"));
  RETURN_IF_ERROR(CheckType(layout.v_type, "V"));
  std::string out;
  out.reserve(16 + T * 12 + 2 * layout.n_layer * (16 + T * H * D * 4));
  Put<uint32_t>(&out, kSeqStateMagic);
  Put<int32_t>(&out, seq_id);
  Put<uint32_t>(&out, 1);  // n_stream
  Put<uint32_t>(&out, static_cast<uint32_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    Put<int32_t>(&out, kv.pos0 + static_cast<int32_t>(t));
    Put<uint32_t>(&out, 1);
    Put<int32_t>(&out, seq_id);
  }
  Put<uint32_t>(&out, layout.v_trans ? 1 : 0);
  Put<uint32_t>(&out, layout.n_layer);
  for (uint32_t il = 0; il < layout.n_layer; ++il) {  // K: a row per cell, [head][dim]
    Put<int32_t>(&out, layout.k_type);
    Put<uint64_t>(&out, uint64_t{layout.n_embd_k} * TypeBytes(layout.k_type));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const float* row = kv.k[il] + (h * T + t) * D;
        for (int64_t d = 0; d < D; ++d) AppendElement(&out, layout.k_type, row[d]);
      }
    }
  }
  for (uint32_t il = 0; il < layout.n_layer; ++il) {
    Put<int32_t>(&out, layout.v_type);
    if (!layout.v_trans) {
      Put<uint64_t>(&out, uint64_t{layout.n_embd_v} * TypeBytes(layout.v_type));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          const float* row = kv.v[il] + (h * T + t) * D;
          for (int64_t d = 0; d < D; ++d) AppendElement(&out, layout.v_type, row[d]);
        }
      }
    } else {  // transposed: for each of the n_embd_v channels, every cell
      Put<uint32_t>(&out, static_cast<uint32_t>(TypeBytes(layout.v_type)));
      Put<uint32_t>(&out, layout.n_embd_v);
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < D; ++d) {
          for (int64_t t = 0; t < T; ++t) {
            AppendElement(&out, layout.v_type, kv.v[il][(h * T + t) * D + d]);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace ragkv::engine::llamacpp
