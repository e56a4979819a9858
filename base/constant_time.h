// constant_time.h: comparing secrets (bearer tokens) without an early exit
// on the first differing byte (the length is not secret).
#ifndef RAGKV_BASE_CONSTANT_TIME_H_
#define RAGKV_BASE_CONSTANT_TIME_H_

#include <cstddef>
#include <string_view>

namespace ragkv {

inline bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

}  // namespace ragkv

#endif  // RAGKV_BASE_CONSTANT_TIME_H_
