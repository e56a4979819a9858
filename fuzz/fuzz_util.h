// fuzz_util.h: helpers shared by the libFuzzer targets in fuzz/. Private.
// Targets whose parser reads files (model loaders, tokenizers) write each
// input to a per-process scratch file; targets may also write their own
// seeds when RAGKV_FUZZ_SEED_DIR is set (scripts/fuzz does this once).
#ifndef RAGKV_FUZZ_FUZZ_UTIL_H_
#define RAGKV_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace ragkv::fuzz {

// ScratchDir: a directory private to this process (created once, removed
// at exit).
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path().string() + "/ragkv_fuzz_" +
                    std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  // Removed at normal exit (constructed after `dir`, so destroyed before it).
  static const struct Remover {
    const std::string* path;
    ~Remover() {
      std::error_code ec;
      std::filesystem::remove_all(*path, ec);
    }
  } remover{&dir};
  return dir;
}

// WriteFile: writes `bytes` to `path` (truncating). False on I/O error.
inline bool WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(f);
}

// SeedDir: the value of RAGKV_FUZZ_SEED_DIR, or "" when unset.
inline std::string SeedDir() {
  const char* d = std::getenv("RAGKV_FUZZ_SEED_DIR");
  return d ? std::string(d) : std::string();
}

// FuzzInput: consumes an input front to back (bytes past the end read as 0).
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? static_cast<uint8_t>(data_[pos_++]) : 0; }
  uint16_t U16() {
    const uint16_t lo = Byte();
    return static_cast<uint16_t>(lo | (uint16_t{Byte()} << 8));
  }
  // Take: up to n bytes.
  std::string_view Take(size_t n) {
    n = n < size_ - pos_ ? n : size_ - pos_;
    std::string_view s(data_ + pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view Rest() { return Take(size_ - pos_); }
  // remaining: bytes not consumed yet.
  size_t remaining() const { return size_ - pos_; }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Frame: the inverse of FuzzInput's Byte/U16/Take layout, for seeds.
inline std::string U16Prefixed(std::string_view s) {
  std::string out;
  out.push_back(static_cast<char>(s.size() & 0xff));
  out.push_back(static_cast<char>((s.size() >> 8) & 0xff));
  out.append(s);
  return out;
}

}  // namespace ragkv::fuzz

#endif  // RAGKV_FUZZ_FUZZ_UTIL_H_
