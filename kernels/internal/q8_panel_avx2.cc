// q8_panel_avx2.cc (internal): the int8 panels of panel.h on AVX2
// (CMakeLists.txt: AVX2 flags): q8_panel_maddubs.inc on 256-bit vectors,
// two a group of 16 columns.
#include <immintrin.h>

#include <algorithm>

#include "kernels/internal/q8_panel_maddubs.inc"

namespace ragkv::kernels::internal {
namespace {

struct Ymm {
  using I = __m256i;
  using F = __m256;
  static constexpr int kVecs = 2;
  static I Load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const I*>(p)); }
  static I Set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I AddBias(I w, int bias) {
    return _mm256_add_epi8(w, _mm256_set1_epi8(static_cast<char>(bias)));
  }
  static I Maddubs(I u, I s) { return _mm256_maddubs_epi16(u, s); }
  // SignPair: |w| times x with w's sign (vpsignb: -128 reads as 128).
  static I SignPair(I w, I x) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  }
  static I Add16(I a, I b) { return _mm256_add_epi16(a, b); }
  static I Add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I Widen(I p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }
  static F LoadF(const float* p) { return _mm256_loadu_ps(p); }
  static F Set1F(float v) { return _mm256_set1_ps(v); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F Cvt(I v) { return _mm256_cvtepi32_ps(v); }
  // Store: the first min(valid, 8) lanes of v (+ beta out) into out.
  static void Store(float* out, F v, int64_t valid, float beta) {
    const I lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const I mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(valid, 8))), lane);
    if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_maskload_ps(out, mask), _mm256_set1_ps(beta), v);
    _mm256_maskstore_ps(out, mask, v);
  }
};

}  // namespace

const PanelKernels kAvx2Panels{Q8PanelImpl<Ymm>, Q4KPanelImpl<Ymm>, Q6KPanelImpl<Ymm>};

}  // namespace ragkv::kernels::internal
