// xxh3_fast.h: XXH3-64 with the widest SIMD this CPU has.
//
// Debian's libxxhash is built for baseline x86-64 (SSE2). XXH3's output does
// not depend on the SIMD width, so kvstore compiles the inline
// implementation once more with AVX2 and picks it at run time: the same
// checksums, about twice the speed on the record-verification hot path.
// Thread-safe (pure functions).
#ifndef RAGKV_KVSTORE_INTERNAL_XXH3_FAST_H_
#define RAGKV_KVSTORE_INTERNAL_XXH3_FAST_H_

#include <cstddef>
#include <cstdint>

namespace ragkv::kvstore::internal {

// Xxh3_64: XXH3_64bits(a[0..na) || b[0..nb)), seed 0. `b` may be null if nb == 0.
uint64_t Xxh3_64(const void* a, size_t na, const void* b, size_t nb);
// Xxh3_64x3: XXH3_64bits(a || b || c), seed 0 (the Redis tier's frame
// checksum: key || frame || payload). Pointers may be null when their size is 0.
uint64_t Xxh3_64x3(const void* a, size_t na, const void* b, size_t nb, const void* c, size_t nc);

}  // namespace ragkv::kvstore::internal

#endif  // RAGKV_KVSTORE_INTERNAL_XXH3_FAST_H_
