// ParseByteSize against a naive reference (digit-by-digit, exact integer
// arithmetic for whole numbers) and its error cases.
#include "base/byte_size.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace ragkv {
namespace {

// NaiveWhole: "<digits><suffix?>" by hand, in integers.
uint64_t NaiveWhole(const std::string& digits, char suffix) {
  uint64_t v = 0;
  for (char c : digits) v = v * 10 + static_cast<uint64_t>(c - '0');
  switch (suffix) {
    case 'k': case 'K': return v << 10;
    case 'm': case 'M': return v << 20;
    case 'g': case 'G': return v << 30;
    case 't': case 'T': return v << 40;
    default: return v;
  }
}

TEST(ByteSizeTest, WholeNumbersMatchNaiveReference) {
  std::mt19937 rng(3);
  const std::string suffixes("\0kKmMgGtT", 9);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t n = rng() % 100000;
    const char suffix = suffixes[i % suffixes.size()];
    std::string s = std::to_string(n);
    const uint64_t want = NaiveWhole(s, suffix);
    if (suffix != '\0') s += suffix;
    absl::StatusOr<uint64_t> got = ParseByteSize(s);
    ASSERT_TRUE(got.ok()) << s << ": " << got.status();
    EXPECT_EQ(*got, want) << s;
  }
}

TEST(ByteSizeTest, FractionsAndEdges) {
  EXPECT_EQ(*ParseByteSize(""), 0u);
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("0.5k"), 512u);
  EXPECT_EQ(*ParseByteSize("1.0009765625K"), 1025u);  // exact in binary
  EXPECT_EQ(*ParseByteSize("2.9"), 2u);               // toward zero
  EXPECT_EQ(*ParseByteSize("16383T"), 16383ull << 40);
  EXPECT_EQ(*ParseByteSize("18446744073709549568"), 18446744073709549568ull);  // 2^64 - 2^11
}

TEST(ByteSizeTest, RejectsWhatIsNotASize) {
  for (const char* bad : {"G", "x", "12abc", "1GB", "1 G", " 1", "-1G", "+1", "1e3", "0x10",
                          "inf", "nan", ".", "1..5", "16777216T", "18446744073709551616"}) {
    absl::StatusOr<uint64_t> r = ParseByteSize(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace ragkv
