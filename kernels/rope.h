// rope.h: rotary position embedding, applied at arbitrary positions, and the
// re-rotation of cached keys by a position delta.
//
// RoPE rotates pair j (j = 0 .. head_dim/2-1) of each head vector by angle
// pos * theta^(-2j/head_dim). Rotations compose: R(p + d) = R(d) R(p), so a key
// cached after RoPE at chunk-local position p is moved to p + d by rotating it
// by d (docs/design.md §3).
#ifndef RAGKV_KERNELS_ROPE_H_
#define RAGKV_KERNELS_ROPE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace ragkv::kernels {

enum class RopeLayout {
  kInterleaved = 0,  // pairs (x[2j], x[2j+1]): llama2.c, GGUF/llama.cpp
  kHalfSplit = 1,    // pairs (x[j], x[j + head_dim/2]): Hugging Face
};

struct RopeParams {
  int head_dim = 0;        // even, > 0
  float theta = 10000.0f;  // base frequency
  RopeLayout layout = RopeLayout::kInterleaved;
  // Per-pair frequency divisors (Llama-3's rope_freqs: pair j turns at
  // theta^(-2j/head_dim) / freq_factors[j]); null = none. [head_dim/2]
  // finite values > 0, not owned.
  const float* freq_factors = nullptr;
  // Linear position scaling (rope_scaling "linear", factor f: 1/f): every
  // angle is multiplied by it. Finite, > 0.
  float freq_scale = 1.0f;
  // Magnitude of the rotation (YaRN's attention factor, GGUF
  // rope.scaling.attn_factor): ApplyRope multiplies cos and sin by it, so
  // q.k picks up mscale^2. RerotateKeys ignores it: a cached key already
  // carries it, and moving that key is a pure rotation. Finite, > 0.
  float mscale = 1.0f;
};

// ApplyRope: rotates x in place (and scales it by params.mscale). x: f32 [tokens, heads, head_dim] with any
// strides for the first two dims and unit stride for the last (so both the
// activation layout [tokens][heads*hd] and the cache layout
// [heads][tokens][hd] are expressible). positions: [tokens] absolute positions.
// Errors: InvalidArgument for odd/mismatched head_dim, null data, bad dtype.
absl::Status ApplyRope(TensorView x, const int32_t* positions, const RopeParams& params);

// RerotateKeys: rotates every token of k by the same delta, in place (moves a
// cached chunk from offset 0 to offset delta; delta may be negative).
// k: [heads, tokens, head_dim] (the KV layout of docs/design.md §3) in f32, f16 or
// bf16, unit stride in the last dim. Uses one cos/sin table of head_dim/2
// entries (on the stack); half types are rotated in f32 and rounded once.
absl::Status RerotateKeys(TensorView k, int64_t delta, const RopeParams& params);

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_ROPE_H_
