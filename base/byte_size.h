// byte_size.h: ParseByteSize, the one parser of byte sizes given by users
// ("512M", "16G", "1.5T", "4096"): every size flag and config value.
// Pure; thread-safe.
#ifndef RAGKV_BASE_BYTE_SIZE_H_
#define RAGKV_BASE_BYTE_SIZE_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ragkv {

// ParseByteSize: a decimal number (a fraction allowed: "1.5G") with an
// optional binary suffix, K/M/G/T (either case) = 2^10/20/30/40, as bytes
// rounded toward zero. "" is 0. InvalidArgument for anything else: no
// number, a trailing unit other than one suffix letter ("1GB"), a negative,
// non-finite or >= 2^64 size.
inline absl::StatusOr<uint64_t> ParseByteSize(std::string_view s) {
  if (s.empty()) return 0;
  double mult = 1;
  std::string_view num = s;
  switch (s.back()) {
    case 'K': case 'k': mult = 0x1p10; break;
    case 'M': case 'm': mult = 0x1p20; break;
    case 'G': case 'g': mult = 0x1p30; break;
    case 'T': case 't': mult = 0x1p40; break;
    default: break;
  }
  if (mult != 1) num.remove_suffix(1);
  // Digits and a point only: SimpleAtod alone would also take a sign, an
  // exponent, "inf" or surrounding blanks.
  const bool digits_only = num.find_first_not_of("0123456789.") == std::string_view::npos;
  double x = 0;
  if (num.empty() || !digits_only ||
      !absl::SimpleAtod(absl::string_view(num.data(), num.size()), &x) || !(x * mult < 0x1p64)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(s), "' is not a byte size (e.g. 4096, 512M, 16G)"));
  }
  return static_cast<uint64_t>(x * mult);
}

}  // namespace ragkv

#endif  // RAGKV_BASE_BYTE_SIZE_H_
