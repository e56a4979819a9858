#include "engine/llamacpp/seq_state.h"

#include <algorithm>
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
  size_t remaining() const { return b_.size() - pos_; }
  absl::Status Skip(uint64_t n) {
    if (n > b_.size() - pos_) return absl::InvalidArgumentError("llama.cpp sequence state: truncated");
    pos_ += n;
    return absl::OkStatus();
  }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

size_t TypeBytes(int32_t type) { return type == kGgmlF32 ? 4 : 2; }

absl::Status CheckType(int32_t type, const char* what) {
  if (type == kGgmlF32 || type == kGgmlF16) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrFormat(
      "llama.cpp caches %s as ggml type %d; ragkv writes F32 or F16 caches only", what, type));
}

// Writer: fills a pre-sized buffer, the caller's string (its capacity kept
// across calls: a fresh 50 MB buffer per handover cost its page faults).
class Writer {
 public:
  Writer(size_t bytes, std::string* out) : out_(*out) { out_.resize(bytes); }
  template <typename T>
  void Put(T v) {
    std::memcpy(out_.data() + at_, &v, sizeof(T));
    at_ += sizeof(T);
  }
  // Row: n elements of src_type at src into dst_type (memcpy when equal).
  void Row(const void* src, int32_t src_type, int32_t dst_type, int64_t n) {
    char* d = out_.data() + at_;
    if (src_type == dst_type) {
      std::memcpy(d, src, n * TypeBytes(src_type));
    } else {
      for (int64_t i = 0; i < n; ++i) Element(src, src_type, i, dst_type, d + i * TypeBytes(dst_type));
    }
    at_ += n * TypeBytes(dst_type);
  }
  // Element: element i of src into dst_type at d.
  static void Element(const void* src, int32_t src_type, int64_t i, int32_t dst_type, char* d) {
    if (src_type == dst_type) {
      std::memcpy(d, static_cast<const char*>(src) + i * TypeBytes(src_type), TypeBytes(src_type));
    } else if (src_type == kGgmlF32) {
      const uint16_t h = kernels::FloatToHalf(static_cast<const float*>(src)[i]);
      std::memcpy(d, &h, 2);
    } else {
      const float f = kernels::HalfToFloat(static_cast<const uint16_t*>(src)[i]);
      std::memcpy(d, &f, 4);
    }
  }
  char* at() { return out_.data() + at_; }
  void Advance(size_t n) { at_ += n; }
  void Finish() { out_.resize(at_); }

 private:
  std::string& out_;
  size_t at_ = 0;
};

}  // namespace

namespace {

// Section: one llama_kv_cache's part of a state blob, from n_stream on.
struct Section {
  uint32_t cells = 0, n_layer = 0, n_embd_k = 0, n_embd_v = 0;
  int32_t k_type = kGgmlF16, v_type = kGgmlF16;
  bool v_trans = false;
};

absl::StatusOr<Section> ParseSection(Reader& r) {
  Section l;
  ASSIGN_OR_RETURN(uint32_t n_stream, r.Get<uint32_t>());
  if (n_stream != 1) {
    return absl::UnimplementedError(absl::StrFormat(
        "llama.cpp context has %d KV streams (kv_unified off); ragkv writes one", n_stream));
  }
  ASSIGN_OR_RETURN(l.cells, r.Get<uint32_t>());
  if (l.cells == 0) return absl::InvalidArgumentError("llama.cpp sequence state holds no cell");
  for (uint32_t i = 0; i < l.cells; ++i) {
    RETURN_IF_ERROR(r.Get<int32_t>().status());
    ASSIGN_OR_RETURN(uint32_t n_seq, r.Get<uint32_t>());
    if (n_seq != 1) {
      return absl::UnimplementedError("llama.cpp cell with cell extensions or several sequences");
    }
    RETURN_IF_ERROR(r.Get<int32_t>().status());
  }
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
    RETURN_IF_ERROR(r.Skip(row * l.cells));
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
      RETURN_IF_ERROR(r.Skip(uint64_t{el} * n_embd_v * l.cells));
    } else {
      ASSIGN_OR_RETURN(uint64_t row, r.Get<uint64_t>());
      embd = row / TypeBytes(type);
      RETURN_IF_ERROR(r.Skip(row * l.cells));
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

}  // namespace

absl::StatusOr<SeqStateLayout> ParseSeqStateLayout(std::string_view blob) {
  Reader r(blob);
  ASSIGN_OR_RETURN(uint32_t magic, r.Get<uint32_t>());
  if (magic != kSeqStateMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "not a llama.cpp sequence state of the pinned version (magic %08x)", magic));
  }
  RETURN_IF_ERROR(r.Get<int32_t>().status());  // the writer's seq id
  ASSIGN_OR_RETURN(Section a, ParseSection(r));
  SeqStateLayout l;
  l.n_layer = a.n_layer;
  l.n_embd_k = a.n_embd_k;
  l.n_embd_v = a.n_embd_v;
  l.k_type = a.k_type;
  l.v_type = a.v_type;
  l.v_trans = a.v_trans;
  l.cells = a.cells;
  if (r.remaining() == 0) return l;
  // An iSWA context: the SWA layers' section follows (same widths and types).
  ASSIGN_OR_RETURN(Section b, ParseSection(r));
  if (r.remaining() != 0) {
    return absl::UnimplementedError("llama.cpp sequence state has more than two sections");
  }
  if (a.n_layer == 0) {
    l.n_embd_k = b.n_embd_k, l.n_embd_v = b.n_embd_v, l.k_type = b.k_type, l.v_type = b.v_type;
  } else if (b.n_layer > 0 && (b.n_embd_k != a.n_embd_k || b.n_embd_v != a.n_embd_v ||
                               b.k_type != a.k_type || b.v_type != a.v_type)) {
    return absl::UnimplementedError("llama.cpp SWA layers cache other K/V widths or types");
  }
  if (b.v_trans != a.v_trans) return absl::InvalidArgumentError("llama.cpp sections differ in v_trans");
  l.two_sections = true;
  l.n_layer_swa = b.n_layer;
  l.n_layer += b.n_layer;
  l.cells_swa = b.cells;
  return l;
}

absl::StatusOr<std::string> EncodeSeqState(const SeqStateLayout& layout, int32_t seq_id,
                                           const SeqKv& kv) {
  std::string blob;
  RETURN_IF_ERROR(EncodeSeqStateInto(layout, seq_id, kv, &blob));
  return blob;
}

namespace {

// WriteSection: one section (n_stream on) of cells t_begin..T-1 of the
// model layers `layers` (indices into kv.k / kv.v).
void WriteSection(const SeqStateLayout& layout, int32_t seq_id, const SeqKv& kv,
                  const std::vector<uint32_t>& layers, int64_t t_begin, Writer& w) {
  const int64_t T = kv.num_tokens, H = kv.n_kv_heads, D = kv.head_dim;
  const int64_t S = kv.head_stride > 0 ? kv.head_stride : T * D;
  const size_t es = TypeBytes(kv.type);
  w.Put<uint32_t>(1);  // n_stream
  w.Put<uint32_t>(static_cast<uint32_t>(T - t_begin));
  for (int64_t t = t_begin; t < T; ++t) {
    w.Put<int32_t>(kv.pos0 + static_cast<int32_t>(t));
    w.Put<uint32_t>(1);
    w.Put<int32_t>(seq_id);
  }
  w.Put<uint32_t>(layout.v_trans ? 1 : 0);
  w.Put<uint32_t>(static_cast<uint32_t>(layers.size()));
  auto at = [&](const void* base, int64_t h, int64_t t) {
    return static_cast<const char*>(base) + (h * S + t * D) * es;
  };
  for (uint32_t il : layers) {  // K: a row per cell, [head][dim]
    w.Put<int32_t>(layout.k_type);
    w.Put<uint64_t>(uint64_t{layout.n_embd_k} * TypeBytes(layout.k_type));
    for (int64_t t = t_begin; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) w.Row(at(kv.k[il], h, t), kv.type, layout.k_type, D);
    }
  }
  for (uint32_t il : layers) {
    w.Put<int32_t>(layout.v_type);
    if (!layout.v_trans) {
      w.Put<uint64_t>(uint64_t{layout.n_embd_v} * TypeBytes(layout.v_type));
      for (int64_t t = t_begin; t < T; ++t) {
        for (int64_t h = 0; h < H; ++h) w.Row(at(kv.v[il], h, t), kv.type, layout.v_type, D);
      }
      continue;
    }
    // Transposed: for each of the n_embd_v channels, every cell.
    w.Put<uint32_t>(static_cast<uint32_t>(TypeBytes(layout.v_type)));
    w.Put<uint32_t>(layout.n_embd_v);
    const size_t ves = TypeBytes(layout.v_type);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) {
        const void* channel = at(kv.v[il], h, 0);
        for (int64_t t = t_begin; t < T; ++t) {
          Writer::Element(channel, kv.type, t * D + d, layout.v_type, w.at());
          w.Advance(ves);
        }
      }
    }
  }
}

}  // namespace

absl::Status EncodeSeqStateInto(const SeqStateLayout& layout, int32_t seq_id, const SeqKv& kv,
                                std::string* blob) {
  const int64_t T = kv.num_tokens, H = kv.n_kv_heads, D = kv.head_dim;
  const int64_t S = kv.head_stride > 0 ? kv.head_stride : T * D;
  if (kv.k.size() != layout.n_layer || kv.v.size() != layout.n_layer || T <= 0 ||
      H * D != layout.n_embd_k || H * D != layout.n_embd_v || S < T * D) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV of %d layers x %d x %d does not fit llama.cpp's %d layers x K %d / V %d",
        kv.k.size(), H, D, layout.n_layer, layout.n_embd_k, layout.n_embd_v));
  }
  RETURN_IF_ERROR(CheckType(kv.type, "ragkv's KV"));
  RETURN_IF_ERROR(CheckType(layout.k_type, "K"));
  RETURN_IF_ERROR(CheckType(layout.v_type, "V"));
  // The sections: every layer with every cell, or global layers with every
  // cell then SWA layers with the last min(window, T) cells.
  std::vector<uint32_t> global, swa;
  const bool split_known = layout.swa_layers.size() == layout.n_layer;
  for (uint32_t il = 0; il < layout.n_layer; ++il) {
    (layout.two_sections && split_known && layout.swa_layers[il] ? swa : global).push_back(il);
  }
  if (layout.two_sections &&
      (!split_known || layout.window <= 0 || swa.size() != layout.n_layer_swa)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama.cpp's state has a sliding-window section of %d layers; the layout names %d SWA "
        "layers of %d with window %d (ProbeLayout with the model's config sets them)",
        layout.n_layer_swa, swa.size(), layout.swa_layers.size(), layout.window));
  }
  const int64_t t_swa = std::max<int64_t>(0, T - layout.window);
  const size_t row_bytes = H * D * (TypeBytes(layout.k_type) + TypeBytes(layout.v_type));
  Writer w(8 + 2 * (20 + T * 12) + layout.n_layer * (24 + T * row_bytes), blob);
  w.Put<uint32_t>(kSeqStateMagic);
  w.Put<int32_t>(seq_id);
  WriteSection(layout, seq_id, kv, global, 0, w);
  if (layout.two_sections) WriteSection(layout, seq_id, kv, swa, t_swa, w);
  w.Finish();
  return absl::OkStatus();
}

}  // namespace ragkv::engine::llamacpp
