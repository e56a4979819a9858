#include "model/internal/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ragkv::model::internal {

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open: ", std::strerror(e)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(e)));
    }
    f.data_ = static_cast<const uint8_t*>(p);
    f.map_len_ = f.size_;
  }
  ::close(fd);
  return f;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (map_len_ > 0) ::munmap(const_cast<uint8_t*>(data_), map_len_);
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    map_len_ = std::exchange(o.map_len_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (map_len_ > 0) ::munmap(const_cast<uint8_t*>(data_), map_len_);
}

absl::Status MappedFile::Check(uint64_t offset, uint64_t len, absl::string_view what) const {
  if (offset > size_ || len > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": truncated: ", what, " needs bytes [",
                                                   offset, ", ", offset + len,
                                                   ") but the file has ", size_));
  }
  return absl::OkStatus();
}

}  // namespace ragkv::model::internal
