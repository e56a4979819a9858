#include "kernels/weight_gemm.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/internal/check.h"
#include "kernels/internal/isa.h"
#include "kernels/internal/panel.h"
#include "kernels/internal/q8.h"

namespace ragkv::kernels {
namespace {

// Rows of x at or below which the per-row dot path is taken (decode).
constexpr int64_t kDotRows = 8;
// Tile of W's rows: ~512 KiB of f32 at k = 4096 (an L2's worth), and at
// least 16 rows so a tile's dequantization is not dominated by per-call work.
int64_t TileRows(int64_t k) { return std::clamp<int64_t>((int64_t{1} << 17) / std::max<int64_t>(k, 1), 16, 256); }

std::vector<float>& Scratch() {
  static thread_local std::vector<float> v;
  return v;
}

absl::Status CheckOperands(const TensorView& x, const WeightMatrix& w, const TensorView& y) {
  RETURN_IF_ERROR(internal::CheckView(x, "WeightGemm x", 2, DType::kF32));
  RETURN_IF_ERROR(internal::CheckView(y, "WeightGemm y", 2, DType::kF32));
  RETURN_IF_ERROR(internal::CheckUnitLast(x, "WeightGemm x"));
  RETURN_IF_ERROR(internal::CheckUnitLast(y, "WeightGemm y"));
  if (w.empty()) return absl::InvalidArgumentError("WeightGemm: empty weight");
  if (x.shape[1] != w.cols || y.shape[0] != x.shape[0] || y.shape[1] != w.rows) {
    return absl::InvalidArgumentError(absl::StrCat("WeightGemm: x ", x.DebugString(), " y ",
                                                   y.DebugString(), " weight [", w.rows, ", ",
                                                   w.cols, "]"));
  }
  return absl::OkStatus();
}

// DotTile: y[i][j0 + j] = x[i] . tile[j] (+ beta * y) for the m rows of x.
void DotTile(const TensorView& x, const float* tile, int64_t nt, int64_t j0, TensorView y,
             float beta) {
  const internal::IsaTable& isa = internal::ActiveTable();
  const int64_t k = x.shape[1];
  for (int64_t i = 0; i < x.shape[0]; ++i) {
    const float* xi = x.as<const float>() + i * x.stride[0];
    float* yi = y.as<float>() + i * y.stride[0] + j0;
    for (int64_t j = 0; j < nt; ++j) {
      const float d = isa.dot(xi, tile + j * k, k);
      yi[j] = beta == 0.0f ? d : d + beta * yi[j];
    }
  }
}

// GemmByDots: few rows of x: tiles of W in parallel, each dequantized into
// the thread's scratch and dotted with every row of x.
absl::Status GemmByDots(TensorView x, const WeightMatrix& w, TensorView y, float beta) {
  const int64_t k = w.cols, tr = TileRows(k), tiles = (w.rows + tr - 1) / tr;
  const int threads = static_cast<int>(std::min<int64_t>(MaxThreads(), tiles));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t r0 = t * tr, nt = std::min(tr, w.rows - r0);
    std::vector<float>& buf = Scratch();
    buf.resize(static_cast<size_t>(nt * k));
    if (!DequantizeRows(w, r0, nt, buf.data()).ok()) continue;  // shapes were checked
    DotTile(x, buf.data(), nt, r0, y, beta);
  }
  return absl::OkStatus();
}

// GemmByTiles: many rows of x: tiles in order, each dequantized (rows in
// parallel) then multiplied by sgemm into its columns of y.
absl::Status GemmByTiles(TensorView x, const WeightMatrix& w, TensorView y, float beta) {
  // Big tiles (~16 MiB of f32): each sgemm call re-packs x, so few calls.
  const int64_t k = w.cols, tr = std::clamp<int64_t>((int64_t{1} << 22) / std::max<int64_t>(k, 1), 256, 8192);
  std::vector<float>& buf = Scratch();
  buf.resize(static_cast<size_t>(std::min(tr, w.rows) * k));
  for (int64_t r0 = 0; r0 < w.rows; r0 += tr) {
    const int64_t nt = std::min(tr, w.rows - r0);
    const int threads = static_cast<int>(std::min<int64_t>(MaxThreads(), nt));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < nt; ++r) {
      (void)DequantizeRows(w, r0 + r, 1, buf.data() + r * k);
    }
    TensorView tile = TensorView::Contiguous(buf.data(), DType::kF32, {nt, k});
    TensorView ys = y;
    ys.data = y.as<float>() + r0;
    ys.shape[1] = nt;
    RETURN_IF_ERROR(Gemm(x, tile, /*trans_b=*/true, ys, 1.0f, beta));
  }
  return absl::OkStatus();
}

// RowTiles: tiles of 32 rows of w over the threads (decode rows: x stays in
// L1); tile(j0, n) does rows [j0, j0 + n).
template <typename Tile>
void RowTiles(const WeightMatrix& w, const Tile& tile) {
  constexpr int64_t kTileRows = 32;
  const int64_t tiles = (w.rows + kTileRows - 1) / kTileRows;
  const int threads = static_cast<int>(std::min<int64_t>(MaxThreads(), tiles));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t j0 = t * kTileRows;
    tile(j0, std::min(kTileRows, w.rows - j0));
  }
}

// Int8Panels: prefill rows on packed panels of 32 weight rows (panel.h)
// spread over the threads, each with its pack scratch (and, on AMX, its
// tile config, K spanning amx_k_bytes a step); panel(j0, n, pack) does one.
template <typename Panel>
void Int8Panels(const WeightMatrix& w, int64_t pack_bytes, bool amx, int amx_k_bytes,
                const Panel& panel) {
  const int64_t panels = (w.rows + internal::kPanelRows - 1) / internal::kPanelRows;
  const int threads = static_cast<int>(std::min<int64_t>(MaxThreads(), panels));
#pragma omp parallel num_threads(threads)
  {
    if (amx) internal::AmxThreadBegin(amx_k_bytes);
    static thread_local std::vector<uint8_t> pack;
    pack.resize(static_cast<size_t>(pack_bytes));
#pragma omp for schedule(dynamic, 1)
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t j0 = p * internal::kPanelRows;
      panel(j0, std::min<int64_t>(internal::kPanelRows, w.rows - j0), pack.data());
    }
    if (amx) internal::AmxThreadEnd();
  }
}

// PrefillPath: how rows beyond kDotRows multiply quantized weights in int8.
enum class PrefillPath { kNone, kAmx, kVnni, kBw, kAvx2 };

PrefillPath Int8Prefill(int64_t m) {
  if (m <= kDotRows) return PrefillPath::kNone;
  if (AmxActive()) return PrefillPath::kAmx;
  if (VnniPanelsActive()) return PrefillPath::kVnni;
  if (BwPanelsActive()) return PrefillPath::kBw;
  return Avx2PanelsActive() ? PrefillPath::kAvx2 : PrefillPath::kNone;
}

// Panels: the kernels of a path without AMX (kVnni, kBw or kAvx2).
const internal::PanelKernels& Panels(PrefillPath path) {
  if (path == PrefillPath::kVnni) return internal::kVnniPanels;
  return path == PrefillPath::kBw ? internal::kBwPanels : internal::kAvx2Panels;
}

// GemmQ8: weights in blocks of 32 (internal::Block32: q8_0, q4_0, q4_1,
// q5_0, q5_1): x quantized to q8_0 blocks once (internal/q8.h, llama.cpp's
// rule), then int8 products: packed panels of 32 weight rows (AMX tiles, or
// AVX-512 VNNI without AMX, or AVX2) for prefill rows, SIMD tiles of weight
// rows for decode rows.
absl::Status GemmQ8(TensorView x, const WeightMatrix& w, TensorView y, float beta) {
  const int64_t m = x.shape[0], k = w.cols, ldy = y.stride[0];
  const PrefillPath path = Int8Prefill(m);
  static thread_local internal::Q8Acts calling_thread_acts;
  static thread_local std::vector<int32_t> calling_thread_zp;
  internal::Q8Acts& acts = calling_thread_acts;  // the workers share the caller's
  internal::QuantizeActsQ8(x.as<const float>(), m, x.stride[0], k,
                           path == PrefillPath::kAmx ? 32 : 1, &acts);
  if (w.type == GgmlType::kQ4_1 || w.type == GgmlType::kQ5_1) internal::SumActsQ8(&acts);
  float* yd = y.as<float>();
  if (path != PrefillPath::kNone) {
    const bool amx = path == PrefillPath::kAmx;
    std::vector<int32_t>& zp = calling_thread_zp;
    if (!amx) internal::ZeroPointSums(acts.q.data(), m, k, internal::kQ8Block, &zp);
    Int8Panels(w, internal::AmxPackBytes(k), amx, 32, [&](int64_t j0, int64_t n, uint8_t* pack) {
      if (amx) {
        internal::Q8PanelAmx(acts, w.type, w.row(j0), w.row_bytes, n, yd + j0, ldy, beta, pack);
      } else {
        Panels(path).q8(acts, zp.data(), w.type, w.row(j0), w.row_bytes, n, yd + j0, ldy, beta,
                        pack);
      }
    });
    return absl::OkStatus();
  }
  const internal::Q8TileFn tile = internal::ActiveQ8Tile();
  RowTiles(w, [&](int64_t j0, int64_t n) {
    tile(acts, w.type, 0, m, w.row(j0), w.row_bytes, n, yd + j0, ldy, beta);
  });
  return absl::OkStatus();
}

// QKPanels: prefill rows of q4_K / q5_K / q6_K on packed panels (AMX,
// VNNI, AVX-512BW or AVX2: path).
void QKPanels(const internal::Q8KActs& acts, const WeightMatrix& w, PrefillPath path, float* yd,
              int64_t ldy, float beta) {
  namespace in = internal;
  const bool amx = path == PrefillPath::kAmx, q6 = w.type == GgmlType::kQ6_K;
  static thread_local std::vector<int32_t> calling_thread_zp;
  std::vector<int32_t>& zp = calling_thread_zp;
  if (!amx) in::ZeroPointSums(acts.q.data(), acts.m, w.cols, q6 ? 16 : 32, &zp);
  const int64_t pack_bytes = q6 ? in::AmxPackBytesQ6K(w.cols) : in::AmxPackBytesQ4K(w.cols);
  const int32_t* z = zp.data();
  const uint64_t rb = w.row_bytes;
  Int8Panels(w, pack_bytes, amx, q6 ? 16 : 32, [&](int64_t j0, int64_t n, uint8_t* pack) {
    const uint8_t* wr = w.row(j0);
    float* out = yd + j0;
    if (amx) {
      return q6 ? in::Q6KPanelAmx(acts, wr, rb, n, out, ldy, beta, pack)
                : in::Q4KPanelAmx(acts, w.type, wr, rb, n, out, ldy, beta, pack);
    }
    const in::PanelKernels& p = Panels(path);
    return q6 ? p.q6k(acts, z, wr, rb, n, out, ldy, beta, pack)
              : p.q4k(acts, z, w.type, wr, rb, n, out, ldy, beta, pack);
  });
}

// GemmQK: q4_K / q5_K / q6_K weights: x quantized to q8_K blocks
// (internal/q8.h, llama.cpp's rule), then int8 products: packed panels
// (prefill rows), else dots over tiles of 32 weight rows spread over the
// threads.
absl::Status GemmQK(TensorView x, const WeightMatrix& w, TensorView y, float beta) {
  const int64_t m = x.shape[0], ldy = y.stride[0];
  const PrefillPath path = Int8Prefill(m);
  static thread_local internal::Q8KActs calling_thread_acts;
  internal::Q8KActs& acts = calling_thread_acts;  // the workers share the caller's
  internal::QuantizeActsQ8K(x.as<const float>(), m, x.stride[0], w.cols,
                            path == PrefillPath::kAmx ? 32 : 1, &acts);
  float* yd = y.as<float>();
  if (path != PrefillPath::kNone) {
    QKPanels(acts, w, path, yd, ldy, beta);
    return absl::OkStatus();
  }
  const internal::QKTileFn tile = internal::ActiveQKTile(w.type);
  RowTiles(w, [&](int64_t j0, int64_t n) { tile(acts, w.row(j0), w.row_bytes, n, yd + j0, ldy, beta); });
  return absl::OkStatus();
}

}  // namespace

WeightMatrix WeightMatrix::Rows(int64_t r0, int64_t n) const {
  WeightMatrix w = *this;
  w.data = row(r0);
  w.rows = n;
  return w;
}

absl::StatusOr<WeightMatrix> MakeWeightMatrix(GgmlType type, const void* data, int64_t rows,
                                              int64_t cols) {
  if (data == nullptr || rows < 0 || cols <= 0) {
    return absl::InvalidArgumentError("MakeWeightMatrix: null data or bad shape");
  }
  ASSIGN_OR_RETURN(GgmlTypeInfo info, GgmlTypeOf(static_cast<uint32_t>(type)));
  ASSIGN_OR_RETURN(uint64_t row_bytes, GgmlRowBytes(info, cols));
  WeightMatrix w;
  w.type = type;
  w.data = static_cast<const uint8_t*>(data);
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = row_bytes;
  return w;
}

WeightMatrix F32Matrix(const float* data, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.data = reinterpret_cast<const uint8_t*>(data);
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = static_cast<uint64_t>(cols) * 4;
  return w;
}

absl::Status DequantizeRows(const WeightMatrix& w, int64_t r0, int64_t n, float* out) {
  if (r0 < 0 || n < 0 || r0 + n > w.rows) {
    return absl::InvalidArgumentError(absl::StrCat("DequantizeRows: rows [", r0, ", ", r0 + n,
                                                   ") outside [0, ", w.rows, ")"));
  }
  const internal::IsaTable& isa = internal::ActiveTable();
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* src = w.row(r0 + r);
    float* dst = out + r * w.cols;
    switch (w.type) {
      case GgmlType::kF16:
        isa.f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, w.cols);
        break;
      case GgmlType::kBF16:
        isa.bf16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, w.cols);
        break;
      case GgmlType::kQ8_0:
        isa.dequant_q8_0(src, dst, w.cols / 32);
        break;
      case GgmlType::kQ4_K:
        isa.dequant_q4_k(src, dst, w.cols / 256);
        break;
      default:
        RETURN_IF_ERROR(DequantizeGgml(w.type, src, dst, w.cols));
    }
  }
  return absl::OkStatus();
}

absl::Status WeightGemm(TensorView x, const WeightMatrix& w, TensorView y, float beta) {
  RETURN_IF_ERROR(CheckOperands(x, w, y));
  if (x.shape[0] == 0 || w.rows == 0) return absl::OkStatus();
  if (w.type == GgmlType::kF32) {
    const TensorView b = TensorView::Contiguous(const_cast<uint8_t*>(w.data), DType::kF32,
                                                {w.rows, w.cols});
    return Gemm(x, b, /*trans_b=*/true, y, 1.0f, beta);
  }
  // The int8 paths where they are the faster ones: decode rows always,
  // prefill rows on packed panels (AMX tiles, or AVX-512 VNNI); an AVX2-only
  // CPU dequantizes a tile and runs sgemm for prefill rows (docs/kernels.md).
  if (x.shape[0] <= kDotRows || Int8Prefill(x.shape[0]) != PrefillPath::kNone) {
    if (internal::Block32(w.type)) return GemmQ8(x, w, y, beta);
    if (w.type == GgmlType::kQ4_K || w.type == GgmlType::kQ5_K || w.type == GgmlType::kQ6_K) {
      return GemmQK(x, w, y, beta);
    }
  }
  if (x.shape[0] <= kDotRows) return GemmByDots(x, w, y, beta);
  return GemmByTiles(x, w, y, beta);
}

}  // namespace ragkv::kernels
