#include "kernels/convert.h"

#include <omp.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu.h"
#include "kernels/internal/isa.h"

namespace ragkv::kernels {
namespace internal {

uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) {  // rounds to >= 65520 -> inf (also inf itself)
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (ax < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 -> 0
    const uint32_t e = ax >> 23;                 // biased f32 exponent
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;              // 14..24 -> result mantissa
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias exponent (127 -> 15) and round the mantissa to 10 bits.
  uint32_t r = ax - 0x38000000u;  // (e - 112) << 23
  r = r + 0x0fffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else {  // subnormal: normalize
      int shift = 0;
      while ((m & 0x400u) == 0) {
        m <<= 1;
        ++shift;
      }
      m &= 0x3ffu;
      x = sign | static_cast<uint32_t>(113 - shift) << 23 | (m << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBf16Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

float Bf16BitsToFloat(uint16_t v) {
  const uint32_t b = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace internal

uint16_t FloatToHalf(float f) { return internal::FloatToHalfBits(f); }
float HalfToFloat(uint16_t h) { return internal::HalfBitsToFloat(h); }
uint16_t FloatToBf16(float f) { return internal::FloatToBf16Bits(f); }
float Bf16ToFloat(uint16_t b) { return internal::Bf16BitsToFloat(b); }

namespace {

constexpr int64_t kChunk = 1 << 14;           // elements per work item
constexpr int64_t kParallelMin = 1 << 16;     // below this, one thread

bool IsFloatType(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// ConvertRange: src[0:n) -> dst[0:n) for one (src, dst) dtype pair.
void ConvertRange(const internal::IsaTable& isa, DType st, const void* src, DType dt, void* dst,
                  int64_t n) {
  if (st == dt) {
    std::memcpy(dst, src, static_cast<size_t>(n) * DTypeSize(st));
    return;
  }
  const auto* s16 = static_cast<const uint16_t*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  if (st == DType::kF32) {
    if (dt == DType::kF16) isa.f32_to_f16(static_cast<const float*>(src), d16, n);
    else isa.f32_to_bf16(static_cast<const float*>(src), d16, n);
    return;
  }
  if (dt == DType::kF32) {
    if (st == DType::kF16) isa.f16_to_f32(s16, static_cast<float*>(dst), n);
    else isa.bf16_to_f32(s16, static_cast<float*>(dst), n);
    return;
  }
  // f16 <-> bf16 through an f32 stack buffer (exact for f16 -> f32 -> bf16
  // rounding: the f32 step is lossless).
  float buf[1024];
  for (int64_t i = 0; i < n; i += 1024) {
    const int64_t m = n - i < 1024 ? n - i : 1024;
    if (st == DType::kF16) {
      isa.f16_to_f32(s16 + i, buf, m);
      isa.f32_to_bf16(buf, d16 + i, m);
    } else {
      isa.bf16_to_f32(s16 + i, buf, m);
      isa.f32_to_f16(buf, d16 + i, m);
    }
  }
}

}  // namespace

absl::Status Convert(TensorView src, TensorView dst) {
  if (!IsFloatType(src.dtype) || !IsFloatType(dst.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("Convert: unsupported dtypes ",
                                                   src.DebugString(), " -> ", dst.DebugString()));
  }
  const int64_t n = src.numel();
  if (n != dst.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("Convert: numel mismatch ", src.DebugString(),
                                                   " -> ", dst.DebugString()));
  }
  if (!src.IsContiguous() || !dst.IsContiguous()) {
    return absl::InvalidArgumentError("Convert: views must be contiguous");
  }
  if (n == 0) return absl::OkStatus();
  if (src.data == nullptr || dst.data == nullptr) {
    return absl::InvalidArgumentError("Convert: null data");
  }
  const internal::IsaTable& isa = internal::ActiveTable();
  const size_t ss = DTypeSize(src.dtype), ds = DTypeSize(dst.dtype);
  const auto* s = static_cast<const char*>(src.data);
  auto* d = static_cast<char*>(dst.data);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = n >= kParallelMin ? MaxThreads() : 1;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * kChunk;
    const int64_t m = n - i < kChunk ? n - i : kChunk;
    ConvertRange(isa, src.dtype, s + i * ss, dst.dtype, d + i * ds, m);
  }
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
