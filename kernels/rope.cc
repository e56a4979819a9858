#include "kernels/rope.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/internal/check.h"
#include "kernels/internal/isa.h"

namespace ragkv::kernels {
namespace {

constexpr int kMaxHeadDim = 8192;
constexpr int64_t kParallelMinElems = 1 << 15;

absl::Status CheckParams(const RopeParams& p) {
  if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("RoPE: head_dim must be even and in (0, ", kMaxHeadDim, "], got ", p.head_dim));
  }
  if (!(p.theta > 1.0f) || !std::isfinite(p.theta)) {
    return absl::InvalidArgumentError(absl::StrCat("RoPE: theta must be > 1, got ", p.theta));
  }
  if (p.layout != RopeLayout::kInterleaved && p.layout != RopeLayout::kHalfSplit) {
    return absl::InvalidArgumentError("RoPE: unknown layout");
  }
  if (!(p.freq_scale > 0.0f) || !std::isfinite(p.freq_scale)) {
    return absl::InvalidArgumentError(absl::StrCat("RoPE: freq_scale must be > 0, got ", p.freq_scale));
  }
  if (!(p.mscale > 0.0f) || !std::isfinite(p.mscale)) {
    return absl::InvalidArgumentError(absl::StrCat("RoPE: mscale must be > 0, got ", p.mscale));
  }
  if (p.freq_factors != nullptr) {
    for (int j = 0; j < p.head_dim / 2; ++j) {
      if (!(p.freq_factors[j] > 0.0f) || !std::isfinite(p.freq_factors[j])) {
        return absl::InvalidArgumentError(
            absl::StrCat("RoPE: freq_factors[", j, "] must be finite and > 0, got ", p.freq_factors[j]));
      }
    }
  }
  return absl::OkStatus();
}

// InvFreq: freq_scale * theta^(-2j/head_dim) / freq_factors[j] for
// j < head_dim/2, in double.
void InvFreq(const RopeParams& p, double* inv_freq) {
  const double log_theta = std::log(static_cast<double>(p.theta));
  for (int j = 0; j < p.head_dim / 2; ++j) {
    double f = std::exp(-log_theta * (2.0 * j) / p.head_dim) * static_cast<double>(p.freq_scale);
    if (p.freq_factors != nullptr) f /= static_cast<double>(p.freq_factors[j]);
    inv_freq[j] = f;
  }
}

// FillTable: cos/sin of pos * inv_freq[j] for j < half. Angles and trig in
// double, rounded once to f32 (the most accurate f32 table; the llama2.c/HF
// f32 recipes differ from it by ~1 ulp of the angle).
void FillTable(double pos, const double* inv_freq, int half, float* cos_t, float* sin_t) {
  for (int j = 0; j < half; ++j) {
    double s, c;
    sincos(pos * inv_freq[j], &s, &c);
    cos_t[j] = static_cast<float>(c);
    sin_t[j] = static_cast<float>(s);
  }
}

}  // namespace

absl::Status ApplyRope(TensorView x, const int32_t* positions, const RopeParams& params) {
  RETURN_IF_ERROR(CheckParams(params));
  RETURN_IF_ERROR(internal::CheckView(x, "ApplyRope x", 3, DType::kF32));
  RETURN_IF_ERROR(internal::CheckUnitLast(x, "ApplyRope x"));
  if (x.shape[2] != params.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("ApplyRope: x ", x.DebugString(),
                                                   " last dim != head_dim ", params.head_dim));
  }
  const int64_t tokens = x.shape[0], heads = x.shape[1];
  if (tokens == 0 || heads == 0) return absl::OkStatus();
  if (positions == nullptr) return absl::InvalidArgumentError("ApplyRope: null positions");
  const internal::IsaTable& isa = internal::ActiveTable();
  const bool half_split = params.layout == RopeLayout::kHalfSplit;
  const int threads = tokens > 1 && x.numel() >= kParallelMinElems ? MaxThreads() : 1;
  float* base = x.as<float>();
  const int half = params.head_dim / 2;
  // Tables: direct double sincos at the first token of each block of
  // kTokBlock tokens and wherever positions jump; for consecutive positions
  // (the usual prefill) the double (cos, sin) pair is advanced by one step of
  // the angle-addition recurrence instead, 6 flops instead of a sincos per
  // pair. Resyncing every block keeps the drift below ~1e-14.
  double inv_freq[kMaxHeadDim / 2], step_c[kMaxHeadDim / 2], step_s[kMaxHeadDim / 2];
  InvFreq(params, inv_freq);
  for (int j = 0; j < half; ++j) sincos(inv_freq[j], &step_s[j], &step_c[j]);
  const double mscale = params.mscale;
  constexpr int64_t kTokBlock = 64;
  const int64_t blocks = (tokens + kTokBlock - 1) / kTokBlock;
  const int block_threads = blocks > 1 ? threads : 1;
#pragma omp parallel for num_threads(block_threads) schedule(static) if (block_threads > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    double c[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
    float cos_t[kMaxHeadDim / 2], sin_t[kMaxHeadDim / 2];
    const int64_t t1 = std::min(tokens, (b + 1) * kTokBlock);
    for (int64_t t = b * kTokBlock; t < t1; ++t) {
      const int64_t pos = positions[t];
      const bool same = t > b * kTokBlock && pos == positions[t - 1];
      const bool next = t > b * kTokBlock && pos == static_cast<int64_t>(positions[t - 1]) + 1;
      if (next) {
        for (int j = 0; j < half; ++j) {
          const double nc = c[j] * step_c[j] - sn[j] * step_s[j];
          sn[j] = sn[j] * step_c[j] + c[j] * step_s[j];
          c[j] = nc;
        }
      } else if (!same) {
        for (int j = 0; j < half; ++j) sincos(static_cast<double>(pos) * inv_freq[j], &sn[j], &c[j]);
      }
      if (!same) {
        for (int j = 0; j < half; ++j) {
          cos_t[j] = static_cast<float>(c[j] * mscale);
          sin_t[j] = static_cast<float>(sn[j] * mscale);
        }
      }
      isa.rope_f32(base + t * x.stride[0], heads, x.stride[1], cos_t, sin_t, params.head_dim,
                   half_split);
    }
  }
  return absl::OkStatus();
}

absl::Status RerotateKeys(TensorView k, int64_t delta, const RopeParams& params) {
  RETURN_IF_ERROR(CheckParams(params));
  if (k.dtype != DType::kF32 && k.dtype != DType::kF16 && k.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("RerotateKeys: dtype must be f32/f16/bf16, got ", k.DebugString()));
  }
  RETURN_IF_ERROR(internal::CheckView(k, "RerotateKeys k", 3, k.dtype));
  RETURN_IF_ERROR(internal::CheckUnitLast(k, "RerotateKeys k"));
  if (k.shape[2] != params.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("RerotateKeys: k ", k.DebugString(),
                                                   " last dim != head_dim ", params.head_dim));
  }
  const int64_t heads = k.shape[0], tokens = k.shape[1];
  if (heads == 0 || tokens == 0 || delta == 0) return absl::OkStatus();
  float cos_t[kMaxHeadDim / 2], sin_t[kMaxHeadDim / 2];
  double inv_freq[kMaxHeadDim / 2];
  InvFreq(params, inv_freq);
  FillTable(static_cast<double>(delta), inv_freq, params.head_dim / 2, cos_t, sin_t);
  const internal::IsaTable& isa = internal::ActiveTable();
  const bool half_split = params.layout == RopeLayout::kHalfSplit;
  // Work items: (head, block of tokens).
  constexpr int64_t kTokBlock = 256;
  const int64_t blocks = (tokens + kTokBlock - 1) / kTokBlock;
  const int64_t items = heads * blocks;
  const int threads = items > 1 && k.numel() >= kParallelMinElems ? MaxThreads() : 1;
  const size_t es = DTypeSize(k.dtype);
  char* base = static_cast<char*>(k.data);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t h = it / blocks, t0 = (it % blocks) * kTokBlock;
    const int64_t n = tokens - t0 < kTokBlock ? tokens - t0 : kTokBlock;
    char* p = base + (h * k.stride[0] + t0 * k.stride[1]) * es;
    switch (k.dtype) {
      case DType::kF32:
        isa.rope_f32(reinterpret_cast<float*>(p), n, k.stride[1], cos_t, sin_t, params.head_dim,
                     half_split);
        break;
      case DType::kF16:
        isa.rope_f16(reinterpret_cast<uint16_t*>(p), n, k.stride[1], cos_t, sin_t,
                     params.head_dim, half_split);
        break;
      default:
        isa.rope_bf16(reinterpret_cast<uint16_t*>(p), n, k.stride[1], cos_t, sin_t,
                      params.head_dim, half_split);
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
