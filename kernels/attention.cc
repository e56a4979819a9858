#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/internal/check.h"
#include "kernels/internal/isa.h"

namespace ragkv::kernels {
namespace {

// Query vectors per task (rows of a tile x group heads) aimed for: enough to
// amortize packing each K tile, small enough that the task's Q/O/S scratch
// stays in L2.
constexpr int kTargetVectors = 60;

absl::Status Validate(const TensorView& q, const int32_t* positions, const TensorView& k,
                      const TensorView& v, const TensorView& out, const AttentionParams& p) {
  if (p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SelectiveAttention: num_heads, num_kv_heads, head_dim must be > 0, got ", p.num_heads,
        ", ", p.num_kv_heads, ", ", p.head_dim));
  }
  if (p.num_heads % p.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("SelectiveAttention: num_kv_heads ",
                                                   p.num_kv_heads, " does not divide num_heads ",
                                                   p.num_heads));
  }
  if (p.causal != CausalMode::kExact && p.causal != CausalMode::kBottomRight) {
    return absl::InvalidArgumentError("SelectiveAttention: unknown causal mode");
  }
  if (p.window < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SelectiveAttention: window ", p.window, " < 0"));
  }
  if (!std::isfinite(p.scale)) {
    return absl::InvalidArgumentError("SelectiveAttention: scale is not finite");
  }
  RETURN_IF_ERROR(internal::CheckView(q, "SelectiveAttention q", 3, DType::kF32));
  RETURN_IF_ERROR(internal::CheckView(k, "SelectiveAttention k", 3, DType::kF32));
  RETURN_IF_ERROR(internal::CheckView(v, "SelectiveAttention v", 3, DType::kF32));
  RETURN_IF_ERROR(internal::CheckView(out, "SelectiveAttention out", 3, DType::kF32));
  RETURN_IF_ERROR(internal::CheckUnitLast(q, "SelectiveAttention q"));
  RETURN_IF_ERROR(internal::CheckUnitLast(k, "SelectiveAttention k"));
  RETURN_IF_ERROR(internal::CheckUnitLast(v, "SelectiveAttention v"));
  RETURN_IF_ERROR(internal::CheckUnitLast(out, "SelectiveAttention out"));
  if (q.shape[1] != p.num_heads || q.shape[2] != p.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("SelectiveAttention: q ", q.DebugString(),
                                                   " != [rows, ", p.num_heads, ", ", p.head_dim,
                                                   "]"));
  }
  if (!internal::SameShape(q, out)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SelectiveAttention: out ", out.DebugString(), " != q ", q.DebugString()));
  }
  if (k.shape[0] != p.num_kv_heads || k.shape[2] != p.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("SelectiveAttention: k ", k.DebugString(),
                                                   " != [", p.num_kv_heads, ", kv_len, ",
                                                   p.head_dim, "]"));
  }
  if (!internal::SameShape(k, v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SelectiveAttention: v ", v.DebugString(), " != k ", k.DebugString()));
  }
  const int64_t rows = q.shape[0], kv_len = k.shape[1];
  if (rows > INT32_MAX || kv_len > INT32_MAX) {
    return absl::InvalidArgumentError("SelectiveAttention: rows/kv_len exceed int32");
  }
  if (rows > 0 && positions == nullptr) {
    return absl::InvalidArgumentError("SelectiveAttention: null positions");
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (positions[r] < 0 || positions[r] >= kv_len) {
      return absl::InvalidArgumentError(absl::StrCat("SelectiveAttention: positions[", r,
                                                     "] = ", positions[r],
                                                     " outside [0, kv_len=", kv_len, ")"));
    }
  }
  return absl::OkStatus();
}

// SortRowsByLimit: per-row last visible key, rows sorted by it (ascending)
// so that a tile's rows have similar limits and tiles beyond a row's limit
// are skipped. Fills *sorted_limits / *sorted_rows (left as they are when no
// row sees a key) and returns their length. Rows that see no key are zeroed
// in `out` here and left out.
int SortRowsByLimit(const int32_t* positions, int64_t rows, int64_t kv_len,
                    const AttentionParams& params, const TensorView& out,
                    std::vector<int32_t>* sorted_rows, std::vector<int32_t>* sorted_limits) {
  thread_local std::vector<std::pair<int32_t, int32_t>> order;  // (limit, row)
  order.clear();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t limit = params.causal == CausalMode::kExact ? positions[r] : kv_len - rows + r;
    if (limit < 0) {  // sees no key (bottom-right mode with rows > kv_len)
      for (int h = 0; h < params.num_heads; ++h) {
        float* o = out.as<float>() + r * out.stride[0] + h * out.stride[1];
        std::fill(o, o + params.head_dim, 0.0f);
      }
      continue;
    }
    order.emplace_back(static_cast<int32_t>(limit), static_cast<int32_t>(r));
  }
  std::sort(order.begin(), order.end());
  const int n = static_cast<int>(order.size());
  if (n == 0) return 0;
  sorted_rows->resize(n);
  sorted_limits->resize(n);
  for (int i = 0; i < n; ++i) {
    (*sorted_limits)[i] = order[i].first;
    (*sorted_rows)[i] = order[i].second;
  }
  return n;
}

// TileRows: sorted rows per (kv head, row tile) task: about kTargetVectors
// query vectors (of `g` heads per kv head), at most `n`, halved while there
// are fewer than 2 tasks per thread.
int TileRows(int n, int g, int kvh, int threads) {
  int tile_rows = std::max(1, (kTargetVectors + g - 1) / g);
  tile_rows = std::min(tile_rows, n);
  while (tile_rows > 1 && static_cast<int64_t>(kvh) * ((n + tile_rows - 1) / tile_rows) <
                              2 * static_cast<int64_t>(threads)) {
    tile_rows = (tile_rows + 1) / 2;
  }
  return tile_rows;
}

// BaseTask: the fields every AttnTask of one call shares.
internal::AttnTask BaseTask(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const AttentionParams& params,
                            int64_t kv_len) {
  const int g = params.num_heads / params.num_kv_heads;
  const int D = params.head_dim;
  internal::AttnTask base;
  base.q = q.as<const float>();
  base.q_row_stride = q.stride[0];
  base.q_head_stride = q.stride[1];
  base.k = k.as<const float>();
  base.k_head_stride = k.stride[0];
  base.k_tok_stride = k.stride[1];
  base.v = v.as<const float>();
  base.v_head_stride = v.stride[0];
  base.v_tok_stride = v.stride[1];
  base.out = out.as<float>();
  base.out_row_stride = out.stride[0];
  base.out_head_stride = out.stride[1];
  base.group = g;
  base.head_dim = D;
  base.scale = params.scale != 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(D));
  base.additive_mask = params.additive_mask;
  base.mask_stride = kv_len;
  base.window = params.window;
  return base;
}

// KeyChunks: the key ranges per task. Too few (kv head, row tile) tasks for
// the threads (decode, short batches): split each task's keys into chunks
// and merge the partial softmax states exactly afterwards (flash-decoding).
// Returns the number of chunks (1: no split); *chunk_keys: keys per chunk,
// a multiple of kAttnKeyTile.
int64_t KeyChunks(int64_t key_count, int64_t tasks, int threads, int64_t* chunk_keys) {
  int64_t chunks = 1;
  if (tasks < 2 * static_cast<int64_t>(threads) && threads > 1) {
    const int64_t want = (2 * threads + tasks - 1) / tasks;
    const int64_t max_chunks = std::max<int64_t>(1, key_count / (4 * internal::kAttnKeyTile));
    chunks = std::min(want, max_chunks);
  }
  *chunk_keys =
      ((key_count + chunks - 1) / chunks + internal::kAttnKeyTile - 1) / internal::kAttnKeyTile *
      internal::kAttnKeyTile;
  if (chunks > 1) chunks = (key_count + *chunk_keys - 1) / *chunk_keys;
  return chunks;
}

}  // namespace

absl::Status SelectiveAttention(TensorView q, const int32_t* positions, TensorView k, TensorView v,
                                TensorView out, const AttentionParams& params) {
  RETURN_IF_ERROR(Validate(q, positions, k, v, out, params));
  const int64_t rows = q.shape[0], kv_len = k.shape[1];
  if (rows == 0) return absl::OkStatus();
  const int g = params.num_heads / params.num_kv_heads;
  const int kvh = params.num_kv_heads;
  const int D = params.head_dim;

  thread_local std::vector<int32_t> sorted_rows, sorted_limits;
  const int n =
      SortRowsByLimit(positions, rows, kv_len, params, out, &sorted_rows, &sorted_limits);
  if (n == 0) return absl::OkStatus();

  const int threads = MaxThreads();
  const int tile_rows = TileRows(n, g, kvh, threads);
  const int tiles = (n + tile_rows - 1) / tile_rows;
  const int64_t tasks = static_cast<int64_t>(tiles) * kvh;

  internal::AttnTask base = BaseTask(q, k, v, out, params, kv_len);

  const internal::IsaTable& isa = internal::ActiveTable();
  const int32_t* rows_p = sorted_rows.data();
  const int32_t* limits_p = sorted_limits.data();
  const size_t ws_floats = internal::AttnWorkspaceFloats(static_cast<int64_t>(tile_rows) * g, D);

  const int64_t key_count = static_cast<int64_t>(sorted_limits[n - 1]) + 1;
  int64_t chunk_keys = 0;
  const int64_t chunks = KeyChunks(key_count, tasks, threads, &chunk_keys);
  const int64_t task_vectors = static_cast<int64_t>(tile_rows) * g;
  const int64_t partial_stride = task_vectors * (D + 2);  // o, m, l of one (task, chunk)
  thread_local std::vector<float> partial;
  if (chunks > 1) {
    const size_t need = static_cast<size_t>(tasks * chunks * partial_stride);
    if (partial.size() < need) partial.resize(need);
  }
  float* partial_p = partial.data();
  const int64_t work = tasks * chunks;
  const int nthreads = work > 1 ? static_cast<int>(std::min<int64_t>(threads, work)) : 1;

#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  {
    thread_local std::vector<float> workspace;
    if (workspace.size() < ws_floats) workspace.resize(ws_floats);
    // Heaviest tiles (largest limits) first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t it = w / chunks, c = w % chunks;
      const int tile = tiles - 1 - static_cast<int>(it / kvh);
      internal::AttnTask t = base;
      t.kv_head = static_cast<int>(it % kvh);
      const int r0 = tile * tile_rows;
      t.rows = rows_p + r0;
      t.limits = limits_p + r0;
      t.nrows = std::min(tile_rows, n - r0);
      t.workspace = workspace.data();
      if (chunks > 1) {
        t.key_begin = c * chunk_keys;
        t.key_end = t.key_begin + chunk_keys;
        float* pp = partial_p + w * partial_stride;
        t.partial_o = pp;
        t.partial_m = pp + task_vectors * D;
        t.partial_l = t.partial_m + task_vectors;
      }
      isa.attention_task(t);
    }
    if (chunks > 1) {
      // Merge: m = max_c m_c, out = sum_c e^(m_c - m) o_c / sum_c e^(m_c - m) l_c.
#pragma omp for schedule(static)
      for (int64_t it = 0; it < tasks; ++it) {
        const int tile = tiles - 1 - static_cast<int>(it / kvh);
        const int kv_head = static_cast<int>(it % kvh);
        const int r0 = tile * tile_rows;
        const int nrows = std::min(tile_rows, n - r0);
        const float* first = partial_p + it * chunks * partial_stride;
        for (int r = 0; r < nrows; ++r) {
          const int64_t row = rows_p[r0 + r];
          for (int h = 0; h < g; ++h) {
            const int64_t m = static_cast<int64_t>(r) * g + h;
            float mx = -INFINITY;
            for (int64_t c = 0; c < chunks; ++c) {
              mx = std::max(mx, first[c * partial_stride + task_vectors * D + m]);
            }
            float* dst = base.out + row * base.out_row_stride +
                         (static_cast<int64_t>(kv_head) * g + h) * base.out_head_stride;
            std::fill(dst, dst + D, 0.0f);
            if (mx == -INFINITY) continue;  // no visible key: zeros
            float l = 0.0f;
            for (int64_t c = 0; c < chunks; ++c) {
              const float* pc = first + c * partial_stride;
              const float mc = pc[task_vectors * D + m];
              if (mc == -INFINITY) continue;
              const float wgt = std::exp(mc - mx);
              l += wgt * pc[task_vectors * D + task_vectors + m];
              const float* oc = pc + m * D;
              for (int d = 0; d < D; ++d) dst[d] += wgt * oc[d];
            }
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            for (int d = 0; d < D; ++d) dst[d] *= inv;
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ragkv::kernels
