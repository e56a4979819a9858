// q8_panel_bw.cc (internal): the int8 panels of panel.h on AVX-512BW
// without VNNI (Skylake-SP / X; CMakeLists.txt: AVX-512BW flags):
// q8_panel_maddubs.inc on 512-bit vectors, one a group of 16 columns.
#include <immintrin.h>

#include "kernels/internal/q8_panel_maddubs.inc"

namespace ragkv::kernels::internal {
namespace {

struct Zmm {
  using I = __m512i;
  using F = __m512;
  static constexpr int kVecs = 1;
  static I Load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I Set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I AddBias(I w, int bias) {
    return _mm512_add_epi8(w, _mm512_set1_epi8(static_cast<char>(bias)));
  }
  static I Maddubs(I u, I s) { return _mm512_maddubs_epi16(u, s); }
  // SignPair: |w| (vpabsb: -128 reads as 128 unsigned) times x negated
  // where w < 0 (AVX-512 has no vpsignb).
  static I SignPair(I w, I x) {
    const __mmask64 neg = _mm512_movepi8_mask(w);
    return _mm512_maddubs_epi16(_mm512_abs_epi8(w),
                                _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x));
  }
  static I Add16(I a, I b) { return _mm512_add_epi16(a, b); }
  static I Add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I Widen(I p) { return _mm512_madd_epi16(p, _mm512_set1_epi16(1)); }
  static F LoadF(const float* p) { return _mm512_loadu_ps(p); }
  static F Set1F(float v) { return _mm512_set1_ps(v); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F Cvt(I v) { return _mm512_cvtepi32_ps(v); }
  // Store: the first min(valid, 16) lanes of v (+ beta out) into out.
  static void Store(float* out, F v, int64_t valid, float beta) {
    const __mmask16 mask = static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1);
    if (beta != 0.0f)
      v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, out), _mm512_set1_ps(beta), v);
    _mm512_mask_storeu_ps(out, mask, v);
  }
};

}  // namespace

const PanelKernels kBwPanels{Q8PanelImpl<Zmm>, Q4KPanelImpl<Zmm>, Q6KPanelImpl<Zmm>};

}  // namespace ragkv::kernels::internal
