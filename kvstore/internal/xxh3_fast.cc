#include "kvstore/internal/xxh3_fast.h"

#include "xxhash.h"

namespace ragkv::kvstore::internal {

uint64_t Xxh3_64Avx2(const void* a, size_t na, const void* b, size_t nb);  // xxh3_avx2.cc
uint64_t Xxh3_64x3Avx2(const void* a, size_t na, const void* b, size_t nb, const void* c,
                       size_t nc);  // xxh3_avx2.cc

namespace {
uint64_t Xxh3_64Baseline(const void* a, size_t na, const void* b, size_t nb) {
  if (nb == 0) return XXH3_64bits(a, na);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, a, na);
  XXH3_64bits_update(st, b, nb);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

uint64_t Xxh3_64x3Baseline(const void* a, size_t na, const void* b, size_t nb, const void* c,
                           size_t nc) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, a, na);
  XXH3_64bits_update(st, b, nb);
  XXH3_64bits_update(st, c, nc);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}
}  // namespace

uint64_t Xxh3_64(const void* a, size_t na, const void* b, size_t nb) {
  return HaveAvx2() ? Xxh3_64Avx2(a, na, b, nb) : Xxh3_64Baseline(a, na, b, nb);
}

uint64_t Xxh3_64x3(const void* a, size_t na, const void* b, size_t nb, const void* c, size_t nc) {
  return HaveAvx2() ? Xxh3_64x3Avx2(a, na, b, nb, c, nc) : Xxh3_64x3Baseline(a, na, b, nb, c, nc);
}

}  // namespace ragkv::kvstore::internal
