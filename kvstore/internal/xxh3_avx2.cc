// Compiled with -mavx2 (kvstore/CMakeLists.txt); called only when the CPU
// has AVX2 (xxh3_fast.cc). Everything xxhash is inlined into this TU.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <cstddef>
#include <cstdint>

#include "xxhash.h"

namespace ragkv::kvstore::internal {

uint64_t Xxh3_64Avx2(const void* a, size_t na, const void* b, size_t nb) {
  if (nb == 0) return XXH3_64bits(a, na);
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, a, na);
  XXH3_64bits_update(&st, b, nb);
  return XXH3_64bits_digest(&st);
}

uint64_t Xxh3_64x3Avx2(const void* a, size_t na, const void* b, size_t nb, const void* c,
                       size_t nc) {
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, a, na);
  XXH3_64bits_update(&st, b, nb);
  XXH3_64bits_update(&st, c, nc);
  return XXH3_64bits_digest(&st);
}

}  // namespace ragkv::kvstore::internal
