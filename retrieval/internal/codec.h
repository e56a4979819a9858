// internal/codec.h: little-endian binary encoding helpers for the on-disk
// formats of retrieval (docs/retrieval.md). Not thread-safe per object.
#ifndef RAGKV_RETRIEVAL_INTERNAL_CODEC_H_
#define RAGKV_RETRIEVAL_INTERNAL_CODEC_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ragkv::retrieval::internal {

class Encoder {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void I64(int64_t v) { Raw(&v, 8); }
  void Bytes(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void I32Array(const std::vector<int32_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    Raw(v.data(), v.size() * 4);
  }
  void I64Array(const std::vector<int64_t>& v) {
    U32(static_cast<uint32_t>(v.size()));
    Raw(v.data(), v.size() * 8);
  }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& str() { return out_; }

 private:
  std::string out_;  // little-endian host assumed (x86-64 / aarch64)
};

// Decoder: every getter returns false on truncation (and then stays failed).
class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}
  bool U8(uint8_t* v) { return Raw(v, 1); }
  bool U32(uint32_t* v) { return Raw(v, 4); }
  bool U64(uint64_t* v) { return Raw(v, 8); }
  bool I64(int64_t* v) { return Raw(v, 8); }
  bool Bytes(std::string* s) {
    uint32_t n;
    if (!U32(&n) || n > in_.size() - pos_) return ok_ = false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool I32Array(std::vector<int32_t>* v) {
    uint32_t n;
    if (!U32(&n) || static_cast<uint64_t>(n) * 4 > in_.size() - pos_) return ok_ = false;
    v->resize(n);
    return Raw(v->data(), static_cast<size_t>(n) * 4);
  }
  bool I64Array(std::vector<int64_t>* v) {
    uint32_t n;
    if (!U32(&n) || static_cast<uint64_t>(n) * 8 > in_.size() - pos_) return ok_ = false;
    v->resize(n);
    return Raw(v->data(), static_cast<size_t>(n) * 8);
  }
  bool Raw(void* p, size_t n) {
    if (!ok_ || n > in_.size() - pos_) return ok_ = false;
    if (n > 0) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return ok_ && pos_ == in_.size(); }
  size_t pos() const { return pos_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// EncodeChunkId: 8-byte big-endian key so RocksDB orders chunks by id.
std::string EncodeChunkId(int64_t id);
int64_t DecodeChunkId(std::string_view key);

}  // namespace ragkv::retrieval::internal

#endif  // RAGKV_RETRIEVAL_INTERNAL_CODEC_H_
