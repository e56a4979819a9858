// clang_compat.h: force-included into ragkv_kernels in the clang fuzz build
// only (fuzz/CMakeLists.txt). kernels/internal/isa_impl.inc uses GCC's
// __builtin_shuffle(v, mask), which clang-14 lacks; this maps it to a
// lane-by-lane permutation with the same result. Reported to the lead;
// remove once the kernels build with clang natively.
#ifndef RAGKV_FUZZ_CLANG_COMPAT_H_
#define RAGKV_FUZZ_CLANG_COMPAT_H_
#if defined(__clang__) && defined(__cplusplus)
template <typename V, typename M>
inline V RagkvClangShuffle(V v, M m) {
  V r = v;
  constexpr int n = static_cast<int>(sizeof(V) / sizeof(v[0]));
  for (int i = 0; i < n; ++i) r[i] = v[m[i] & (n - 1)];
  return r;
}
#define __builtin_shuffle(v, m) RagkvClangShuffle(v, m)
#endif
#endif  // RAGKV_FUZZ_CLANG_COMPAT_H_
