// gguf_file.h: the GGUF container as parsed metadata and tensor infos
// (docs/model.md "GGUF"), shared by the model loader (gguf.cc) and the
// tokenizer readers. Private to model/.
#ifndef RAGKV_MODEL_INTERNAL_GGUF_FILE_H_
#define RAGKV_MODEL_INTERNAL_GGUF_FILE_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "model/internal/mapped_file.h"

namespace ragkv::model::internal {

enum GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

struct Value {
  // Scalars are held as double (numbers, bool) or string; arrays as vectors.
  std::variant<double, std::string, std::vector<double>, std::vector<std::string>> v;
  bool is_number() const { return v.index() == 0; }
};

struct TensorInfo {
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous one
  uint32_t type = 0;
  uint64_t offset = 0;  // relative to the data section
};

struct Gguf {
  uint32_t version = 0;
  std::map<std::string, Value> kv;
  std::map<std::string, TensorInfo> tensors;
  uint64_t data_offset = 0;
};

// ParseGguf: the header, metadata and tensor infos of a mapped GGUF file
// (v2 or v3), every offset bounds-checked; errors name the file's problem.
absl::StatusOr<Gguf> ParseGguf(const MappedFile& f);

// Typed metadata accessors: GetNumber errors (naming `path` and the key)
// when the key is absent or not a number; the *Or forms return `def`.
absl::StatusOr<double> GetNumber(const Gguf& g, const std::string& path, const std::string& key);
double GetNumberOr(const Gguf& g, const std::string& key, double def);
std::string GetStringOr(const Gguf& g, const std::string& key, const std::string& def);

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_GGUF_FILE_H_
