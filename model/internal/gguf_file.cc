// gguf_file.cc: the GGUF container parser (gguf_file.h).
#include "model/internal/gguf_file.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace ragkv::model::internal {
namespace {

absl::Status ReadString(Reader& r, const MappedFile& f, std::string* out, absl::string_view what) {
  uint64_t len = 0;
  RETURN_IF_ERROR(r.Read(&len, what));
  return r.ReadBytes(len, out, what);
}

absl::StatusOr<double> ReadNumber(Reader& r, uint32_t type, absl::string_view what) {
  switch (type) {
#define RAGKV_GGUF_NUM(code, T) \
  case code: {                  \
    T x{};                      \
    RETURN_IF_ERROR(r.Read(&x, what)); \
    return static_cast<double>(x); \
  }
    RAGKV_GGUF_NUM(kU8, uint8_t)
    RAGKV_GGUF_NUM(kI8, int8_t)
    RAGKV_GGUF_NUM(kU16, uint16_t)
    RAGKV_GGUF_NUM(kI16, int16_t)
    RAGKV_GGUF_NUM(kU32, uint32_t)
    RAGKV_GGUF_NUM(kI32, int32_t)
    RAGKV_GGUF_NUM(kF32, float)
    RAGKV_GGUF_NUM(kU64, uint64_t)
    RAGKV_GGUF_NUM(kI64, int64_t)
    RAGKV_GGUF_NUM(kF64, double)
#undef RAGKV_GGUF_NUM
    case kBool: {
      uint8_t b = 0;
      RETURN_IF_ERROR(r.Read(&b, what));
      return b ? 1.0 : 0.0;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown GGUF value type ", type, " in ", what));
  }
}

}  // namespace

absl::StatusOr<Gguf> ParseGguf(const MappedFile& f) {
  const std::string& path = f.path();
  Reader r(f);
  uint32_t magic = 0;
  RETURN_IF_ERROR(r.Read(&magic, "GGUF magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad magic (not a GGUF file)"));
  }
  Gguf g;
  RETURN_IF_ERROR(r.Read(&g.version, "GGUF version"));
  if (g.version != 2 && g.version != 3) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": GGUF version ", g.version, " is not supported (only 2 and 3)"));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  RETURN_IF_ERROR(r.Read(&n_tensors, "GGUF tensor count"));
  RETURN_IF_ERROR(r.Read(&n_kv, "GGUF metadata count"));
  // Each entry takes at least 8+4 (kv) or 8+4+4+8 bytes (tensor).
  if (n_kv > f.size() / 12 || n_tensors > f.size() / 24) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: GGUF header claims %d metadata entries and %d tensors, more than the %d-byte file "
        "can hold",
        path, n_kv, n_tensors, f.size()));
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    RETURN_IF_ERROR(ReadString(r, f, &key, absl::StrCat("metadata key #", i)));
    uint32_t type = 0;
    RETURN_IF_ERROR(r.Read(&type, key));
    Value val;
    if (type == kString) {
      std::string s;
      RETURN_IF_ERROR(ReadString(r, f, &s, key));
      val.v = std::move(s);
    } else if (type == kArray) {
      uint32_t et = 0;
      uint64_t n = 0;
      RETURN_IF_ERROR(r.Read(&et, key));
      RETURN_IF_ERROR(r.Read(&n, key));
      if (n > f.size() - r.offset()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: truncated: array %s claims %d elements", path, key, n));
      }
      if (et == kString) {
        std::vector<std::string> arr(n);
        for (uint64_t j = 0; j < n; ++j) RETURN_IF_ERROR(ReadString(r, f, &arr[j], key));
        val.v = std::move(arr);
      } else if (et == kArray) {
        return absl::UnimplementedError(absl::StrCat(path, ": nested array in ", key));
      } else {
        std::vector<double> arr(n);
        for (uint64_t j = 0; j < n; ++j) {
          auto x = ReadNumber(r, et, key);
          if (!x.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", x.status().message()));
          arr[j] = *x;
        }
        val.v = std::move(arr);
      }
    } else {
      auto x = ReadNumber(r, type, key);
      if (!x.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", x.status().message()));
      val.v = *x;
    }
    g.kv[key] = std::move(val);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    std::string name;
    RETURN_IF_ERROR(ReadString(r, f, &name, absl::StrCat("tensor info #", i)));
    TensorInfo t;
    uint32_t nd = 0;
    RETURN_IF_ERROR(r.Read(&nd, name));
    if (nd == 0 || nd > 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", name, " has ", nd, " dims (expected 1..4)"));
    }
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t x = 0;
      RETURN_IF_ERROR(r.Read(&x, name));
      if (x == 0 || x > (uint64_t{1} << 40)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, " has dim ", x));
      }
      t.dims.push_back(static_cast<int64_t>(x));
    }
    RETURN_IF_ERROR(r.Read(&t.type, name));
    RETURN_IF_ERROR(r.Read(&t.offset, name));
    g.tensors[name] = std::move(t);
  }
  uint64_t alignment = 32;
  if (auto it = g.kv.find("general.alignment"); it != g.kv.end() && it->second.is_number()) {
    alignment = static_cast<uint64_t>(std::get<double>(it->second.v));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": general.alignment ", alignment, " is not a power of two"));
    }
  }
  g.data_offset = (r.offset() + alignment - 1) / alignment * alignment;
  return g;
}

// Typed metadata accessors.
absl::StatusOr<double> GetNumber(const Gguf& g, const std::string& path, const std::string& key) {
  auto it = g.kv.find(key);
  if (it == g.kv.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing GGUF metadata ", key));
  }
  if (!it->second.is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": GGUF metadata ", key, " is not a number"));
  }
  return std::get<double>(it->second.v);
}
double GetNumberOr(const Gguf& g, const std::string& key, double def) {
  auto it = g.kv.find(key);
  if (it == g.kv.end() || !it->second.is_number()) return def;
  return std::get<double>(it->second.v);
}
std::string GetStringOr(const Gguf& g, const std::string& key, const std::string& def) {
  auto it = g.kv.find(key);
  if (it == g.kv.end() || it->second.v.index() != 1) return def;
  return std::get<std::string>(it->second.v);
}

}  // namespace ragkv::model::internal
