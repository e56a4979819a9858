#include "kernels/ggml_quant.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/internal/isa.h"

namespace ragkv::kernels {
namespace {

constexpr int kQK = 32;   // elements of a Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 block
constexpr int kQKK = 256; // elements of a K-quant super-block

constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::kF32, "f32", 1, 4, false},
    {GgmlType::kF16, "f16", 1, 2, false},
    {GgmlType::kQ4_0, "q4_0", kQK, 2 + kQK / 2, true},
    {GgmlType::kQ4_1, "q4_1", kQK, 4 + kQK / 2, true},
    {GgmlType::kQ5_0, "q5_0", kQK, 2 + 4 + kQK / 2, true},
    {GgmlType::kQ5_1, "q5_1", kQK, 4 + 4 + kQK / 2, true},
    {GgmlType::kQ8_0, "q8_0", kQK, 2 + kQK, true},
    {GgmlType::kQ4_K, "q4_K", kQKK, 4 + 12 + kQKK / 2, true},
    {GgmlType::kQ5_K, "q5_K", kQKK, 4 + 12 + kQKK / 8 + kQKK / 2, true},
    {GgmlType::kQ6_K, "q6_K", kQKK, kQKK / 2 + kQKK / 4 + kQKK / 16 + 2, true},
    {GgmlType::kBF16, "bf16", 1, 2, false},
};

// Names of ggml types ragkv does not read, for the error message.
const char* UnsupportedName(uint32_t id) {
  switch (id) {
    case 9: return "q8_1";
    case 10: return "q2_K";
    case 11: return "q3_K";
    case 15: return "q8_K";
    case 16: return "iq2_xxs";
    case 17: return "iq2_xs";
    case 18: return "iq3_xxs";
    case 19: return "iq1_s";
    case 20: return "iq4_nl";
    case 21: return "iq3_s";
    case 22: return "iq2_s";
    case 23: return "iq4_xs";
    case 29: return "iq1_m";
    case 34: return "tq1_0";
    case 35: return "tq2_0";
    case 39: return "mxfp4";
    default: return nullptr;
  }
}

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return internal::HalfBitsToFloat(h);
}

// Q4_0: d (f16), 16 bytes of nibbles; element j = (nibble - 8) * d, low
// nibbles first (elements 0..15), then high nibbles (16..31).
void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: d, m (f16), nibbles; element = nibble * d + m.
void Q4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// FifthBits: bit 4 of the 5-bit values j and j + 16 from the 32-bit qh.
inline void FifthBits(uint32_t qh, int j, int* lo, int* hi) {
  *lo = static_cast<int>(((qh >> j) << 4) & 0x10);
  *hi = static_cast<int>((qh >> (j + 12)) & 0x10);
}

// Q5_0: d, qh (32 high bits), nibbles; element = (5-bit value - 16) * d.
void Q5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < kQK / 2; ++j) {
    int lo, hi;
    FifthBits(qh, j, &lo, &hi);
    y[j] = static_cast<float>(((qs[j] & 0x0F) | lo) - 16) * d;
    y[j + kQK / 2] = static_cast<float>(((qs[j] >> 4) | hi) - 16) * d;
  }
}

// Q5_1: d, m, qh, nibbles; element = 5-bit value * d + m.
void Q5_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < kQK / 2; ++j) {
    int lo, hi;
    FifthBits(qh, j, &lo, &hi);
    y[j] = static_cast<float>((qs[j] & 0x0F) | lo) * d + m;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) | hi) * d + m;
  }
}

// Q8_0: d, 32 int8; element = q * d.
void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// ScaleMinK4: the 6-bit scale and min of sub-block j (0..7) packed in the
// 12 scale bytes of a Q4_K / Q5_K super-block.
inline void ScaleMinK4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q4_K: d, dmin (f16), 12 scale bytes, 128 nibble bytes; 8 sub-blocks of 32:
// element = (d * scale) * nibble - (dmin * min).
void Q4_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int is = 0; is < 8; is += 2, q += 32) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: as Q4_K with a fifth bit per element from 32 qh bytes (bit pair
// 2k, 2k+1 of qh[l] for sub-blocks 2k, 2k+1).
void Q5_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int is = 0; is < 8; is += 2, ql += 32) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

// Q6_K: 128 low-nibble bytes, 64 high-2-bit bytes, 16 int8 scales, d (f16);
// two halves of 128: element = (d * scale) * (6-bit value - 32).
void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn BlockDequantizer(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return Q4_0;
    case GgmlType::kQ4_1: return Q4_1;
    case GgmlType::kQ5_0: return Q5_0;
    case GgmlType::kQ5_1: return Q5_1;
    case GgmlType::kQ8_0: return Q8_0;
    case GgmlType::kQ4_K: return Q4_K;
    case GgmlType::kQ5_K: return Q5_K;
    case GgmlType::kQ6_K: return Q6_K;
    default: return nullptr;
  }
}

}  // namespace

absl::StatusOr<GgmlTypeInfo> GgmlTypeOf(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  const char* name = UnsupportedName(id);
  return absl::UnimplementedError(absl::StrCat(
      "ggml type ", id, name ? absl::StrCat(" (", name, ")") : std::string(),
      " is not supported (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K are)"));
}

absl::StatusOr<uint64_t> GgmlRowBytes(const GgmlTypeInfo& info, int64_t n) {
  if (n < 0 || n % info.block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a row of ", n, " elements is not a whole number of ",
                                                   info.name, " blocks of ", info.block_elems));
  }
  return static_cast<uint64_t>(n / info.block_elems) * static_cast<uint64_t>(info.block_bytes);
}

absl::Status DequantizeGgml(GgmlType t, const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::kF32:
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
      return absl::OkStatus();
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Half(p + 2 * i);
      return absl::OkStatus();
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = internal::Bf16BitsToFloat(h);
      }
      return absl::OkStatus();
    default: break;
  }
  absl::StatusOr<GgmlTypeInfo> info = GgmlTypeOf(static_cast<uint32_t>(t));
  if (!info.ok()) return info.status();
  if (n % info->block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat(n, " elements are not whole ", info->name,
                                                   " blocks"));
  }
  const BlockFn fn = BlockDequantizer(t);
  for (int64_t b = 0; b < n / info->block_elems; ++b) {
    fn(p + b * info->block_bytes, dst + b * info->block_elems);
  }
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
