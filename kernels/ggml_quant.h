// ggml_quant.h: the block encodings of ggml / GGUF weight tensors (bit
// layouts exactly ggml's, docs/ggml_quant.md) and their dequantization.
//
// A row of n elements of a block type is n / block_elems consecutive
// blocks of block_bytes each. Dequantization reproduces ggml's own
// to_float bit for bit (same products and sums in the same order, no
// fused multiply-add), so a weight dequantized here equals what
// llama.cpp's reference path reads from the same file.
// Thread-safe (pure functions).
#ifndef RAGKV_KERNELS_GGML_QUANT_H_
#define RAGKV_KERNELS_GGML_QUANT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ragkv::kernels {

// GgmlType: the ggml_type ids a GGUF tensor may carry that ragkv reads.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;     // ggml's name: "q4_K", "f16", ...
  int block_elems;      // elements per block (1 for f32/f16/bf16)
  int block_bytes;      // bytes per block
  bool quantized;
};

// GgmlTypeOf: the info of ggml type id `id`; Unimplemented naming the id
// (and ggml's name when known, e.g. "iq2_xxs") for a type ragkv does not read.
absl::StatusOr<GgmlTypeInfo> GgmlTypeOf(uint32_t id);

// GgmlRowBytes: bytes of a row of `n` elements of `info`; InvalidArgument
// when n is not a multiple of its block size.
absl::StatusOr<uint64_t> GgmlRowBytes(const GgmlTypeInfo& info, int64_t n);

// DequantizeGgml: `n` elements (a multiple of the block size) of type `t`
// at `src` into f32 `dst`. InvalidArgument on a bad n.
absl::Status DequantizeGgml(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_GGML_QUANT_H_
