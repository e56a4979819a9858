// mapped_file.h: MappedFile, a read-only mmap of a whole file with bounds-
// checked access. Move-only; thread-compatible (immutable after Open).
#ifndef RAGKV_MODEL_INTERNAL_MAPPED_FILE_H_
#define RAGKV_MODEL_INTERNAL_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ragkv::model::internal {

class MappedFile {
 public:
  // Open: NotFound if missing, InvalidArgument if not a regular file,
  // Internal on mmap failure. An empty file maps to size() == 0.
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  MappedFile& operator=(MappedFile&& o) noexcept;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Check: OK iff [offset, offset+len) lies inside the file; otherwise
  // InvalidArgument "<path>: truncated: <what> needs bytes [a, b) but the
  // file has N".
  absl::Status Check(uint64_t offset, uint64_t len, absl::string_view what) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t map_len_ = 0;
};

// Reader: a cursor over a MappedFile with checked little-endian reads.
class Reader {
 public:
  explicit Reader(const MappedFile& f, uint64_t offset = 0) : f_(f), off_(offset) {}
  template <typename T>
  absl::Status Read(T* out, absl::string_view what) {
    absl::Status s = f_.Check(off_, sizeof(T), what);
    if (!s.ok()) return s;
    std::memcpy(out, f_.data() + off_, sizeof(T));
    off_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status ReadBytes(uint64_t n, std::string* out, absl::string_view what) {
    absl::Status s = f_.Check(off_, n, what);
    if (!s.ok()) return s;
    out->assign(reinterpret_cast<const char*>(f_.data() + off_), n);
    off_ += n;
    return absl::OkStatus();
  }
  absl::Status Skip(uint64_t n, absl::string_view what) {
    absl::Status s = f_.Check(off_, n, what);
    if (!s.ok()) return s;
    off_ += n;
    return absl::OkStatus();
  }
  uint64_t offset() const { return off_; }
  void set_offset(uint64_t o) { off_ = o; }

 private:
  const MappedFile& f_;
  uint64_t off_;
};

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_MAPPED_FILE_H_
