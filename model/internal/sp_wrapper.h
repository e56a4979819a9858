// sp_wrapper.h: a std-only facade over sentencepiece::SentencePieceProcessor.
// Debian's sentencepiece header declares `namespace absl { using
// std::string_view; }`, which clashes with the real abseil, so the library
// is only ever included by sp_wrapper.cc, which includes no abseil header.
// Internal. Immutable after Load; const methods are thread-safe.
#ifndef RAGKV_MODEL_INTERNAL_SP_WRAPPER_H_
#define RAGKV_MODEL_INTERNAL_SP_WRAPPER_H_

#include <memory>
#include <string>
#include <vector>

namespace ragkv::model::internal {

class SpWrapper {
 public:
  SpWrapper();
  ~SpWrapper();
  // Load: false with *error set on failure.
  bool Load(const std::string& path, std::string* error);
  bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* out, std::string* error) const;
  std::string IdToPiece(int id) const;
  int PieceSize() const;
  int bos_id() const;
  int eos_id() const;
  bool IsControl(int id) const;
  bool IsUnused(int id) const;
  bool IsByte(int id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ragkv::model::internal

#endif  // RAGKV_MODEL_INTERNAL_SP_WRAPPER_H_
