// panel.h (internal): packed weight panels for int8 prefill rows, and the
// kernels that consume them: AMX tiles (q8_amx.cc, q8k_amx.cc), AVX-512
// VNNI (q8_panel_vnni.cc) where AMX is not active, and vpmaddubsw where
// there is no VNNI: AVX-512BW (q8_panel_bw.cc) and AVX2 (q8_panel_avx2.cc)
// (docs/kernels.md, "AVX-512 VNNI panels", "AVX2 panels").
//
// A panel is kPanelRows (32) weight rows, repacked per call into steps: one
// step is a span of K (a block of 32 for q8_0 / q4_0 / q4_1 / q5_0 / q5_1 and
// for the q4_K / q5_K sub-blocks, a group of 16 for q6_K) with its int8
// codes in VNNI order (two groups of 16 columns; a group is K_step / 4 rows
// of 64 bytes: 16 columns x 4 consecutive codes) and one f32 scale per
// column. Codes are signed int8: q8_0 as stored, q4_0 / q5_0 minus their
// offset, q4_1 / q5_1 / q4_K / q5_K as 0..31, q6_K minus 32. Columns past n
// are zero. Layouts (bytes):
//   block32: per block  B0 (512), B1 (512), 32 f32 d, 32 f32 m (q4_1 / q5_1)
//   q4_K:    per super-block 8 x [B0 (512), B1 (512), 32 f32 d sc_j],
//            then 8 x 32 f32 dmin m_j
//   q6_K:    per super-block 16 x [B0 (256), B1 (256), 32 f32 d sc_g]
// Pack* are pure and thread-safe; each thread packs into its own scratch.
#ifndef RAGKV_KERNELS_INTERNAL_PANEL_H_
#define RAGKV_KERNELS_INTERNAL_PANEL_H_

#include <cstdint>
#include <vector>

#include "kernels/ggml_quant.h"
#include "kernels/internal/q8.h"

namespace ragkv::kernels::internal {

inline constexpr int kPanelRows = 32;
static_assert(kPanelRows == kAmxPanel);
inline constexpr int64_t kBlock32Stride = 2 * 512 + 2 * kPanelRows * 4;
inline constexpr int64_t kQ4KSub = 2 * 512 + kPanelRows * 4;
inline constexpr int64_t kQ4KSuper = 8 * kQ4KSub + 8 * kPanelRows * 4;
inline constexpr int64_t kQ6KGroup = 2 * 256 + kPanelRows * 4;
inline constexpr int64_t kQ6KSuper = 16 * kQ6KGroup;

// Pack*: n <= kPanelRows rows of w (w_row_bytes apart), nb blocks (of 32,
// or super-blocks of 256) each, into `pack` (the Panel*Bytes of k).
void PackBlock32(GgmlType type, const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb,
                 uint8_t* pack);
void PackQ4K(bool q5, const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb, uint8_t* pack);
void PackQ6K(const uint8_t* w, uint64_t w_row_bytes, int64_t n, int64_t nb, uint8_t* pack);

// ZeroPointSums: out[i * (k / step) + s] = -128 * (sum of the `step` codes of
// step s of row i), rows [0, rows) of q (k codes a row): the term that
// turns the VNNI panels' unsigned products back into signed ones (and,
// divided by 128 and times the bias, the maddubs panels' biased ones).
void ZeroPointSums(const int8_t* q, int64_t rows, int64_t k, int step, std::vector<int32_t>* out);

// PanelKernels: the panels without AMX, one set per ISA, each reading the
// AMX panels' packed layouts (q8.h's products). `zp` is ZeroPointSums of the
// activations with step 32 (Block32, q4_K, q5_K) or 16 (q6_K). Any a.m_pad.
struct PanelKernels {
  void (*q8)(const Q8Acts& a, const int32_t* zp, GgmlType type, const uint8_t* w,
             uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta, uint8_t* pack);
  void (*q4k)(const Q8KActs& a, const int32_t* zp, GgmlType type, const uint8_t* w,
              uint64_t w_row_bytes, int64_t n, float* y, int64_t ldy, float beta, uint8_t* pack);
  void (*q6k)(const Q8KActs& a, const int32_t* zp, const uint8_t* w, uint64_t w_row_bytes,
              int64_t n, float* y, int64_t ldy, float beta, uint8_t* pack);
};
// AVX-512 VNNI (q8_panel_vnni.cc), and vpmaddubsw for CPUs without VNNI
// (exact: see q8_panel_maddubs.inc): AVX-512BW (q8_panel_bw.cc) and AVX2
// (q8_panel_avx2.cc).
extern const PanelKernels kVnniPanels;
extern const PanelKernels kBwPanels;
extern const PanelKernels kAvx2Panels;

}  // namespace ragkv::kernels::internal

#endif  // RAGKV_KERNELS_INTERNAL_PANEL_H_
