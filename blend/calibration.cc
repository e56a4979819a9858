#include "blend/calibration.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "model/loader.h"

namespace ragkv::blend {
namespace {

// MeasureFileRead: write `bytes` to a scratch file, fsync, drop it from the
// page cache, time one sequential read. 0 when it cannot be measured.
double MeasureFileRead(size_t bytes, const std::string& dir) {
  if (bytes == 0) return 0;
  std::string path = absl::StrCat(dir, "/ragkv-plan-read-XXXXXX");
  std::vector<char> tmpl(path.begin(), path.end());
  tmpl.push_back('\0');
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return 0;
  std::vector<char> buf(size_t{4} << 20);
  std::mt19937 rng(7);
  for (auto& c : buf) c = static_cast<char>(rng());
  size_t written = 0;
  bool ok = true;
  while (written < bytes && ok) {
    const size_t n = std::min(buf.size(), bytes - written);
    ok = ::write(fd, buf.data(), n) == static_cast<ssize_t>(n);
    written += n;
  }
  double bw = 0;
  if (ok && ::fsync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0) {
    ::lseek(fd, 0, SEEK_SET);
    const Clock::time_point t0 = Clock::now();
    size_t got = 0;
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) got += static_cast<size_t>(n);
    const double dt = SecondsSince(t0);
    if (got == bytes && dt > 0) bw = static_cast<double>(got) / dt;
  }
  ::close(fd);
  ::unlink(tmpl.data());
  return bw;
}

// Typical: the median wall time of `runs` calls of `f` (after one warm-up).
// The median, not the best: these rates predict median TTFTs measured on the
// same (possibly loaded) machine, not its unloaded peak.
template <typename F>
absl::StatusOr<double> Typical(int runs, F f) {
  RETURN_IF_ERROR(f());
  std::vector<double> t;
  for (int r = 0; r < std::max(1, runs); ++r) {
    const Clock::time_point t0 = Clock::now();
    RETURN_IF_ERROR(f());
    t.push_back(SecondsSince(t0));
  }
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (auto& x : v) x = u(rng);
  return v;
}

using kernels::DType;
using kernels::TensorView;

// MeasureModelKernels: the kernel rates of one layer of `s` (see
// CpuMeasureOptions::model).
absl::Status MeasureModelKernels(const CpuMeasureOptions& o, CpuCeilings* c) {
  const ModelShape& s = o.model;
  const int64_t dim = s.dim, hd = s.head_dim, qd = int64_t{s.heads} * hd,
                kvd = int64_t{s.kv_heads} * hd, ffn = s.ffn;
  if (dim <= 0 || hd <= 0 || s.heads <= 0 || s.kv_heads <= 0 || ffn <= 0 || hd % 2 != 0) {
    return absl::InvalidArgumentError("MeasureCpu: model shape incomplete");
  }
  // 1. Projection GEMMs, as Model::ForwardLayer runs them. A forward pass
  // walks the layers, so each layer's weights arrive cold from DRAM after
  // the previous layers' work: the runs cycle through `sets` distinct
  // weight sets (one per layer, up to ~256 MB in all) instead of timing
  // one set that stays in cache.
  const double layer_weights = static_cast<double>((qd + 2 * kvd) * dim + dim * qd +
                                                   2 * ffn * dim + dim * ffn);
  const int sets = static_cast<int>(std::clamp<double>(
      std::ceil(double{256 << 20} / (layer_weights * sizeof(float))), 1,
      std::max(1, s.layers)));
  struct LayerW {
    std::vector<float> wqkv, wo, wgu, wd;
  };
  std::vector<LayerW> lw(sets);
  for (int i = 0; i < sets; ++i) {
    const uint32_t seed = 11 + 8 * static_cast<uint32_t>(i);
    lw[i] = {Random((qd + 2 * kvd) * dim, seed), Random(dim * qd, seed + 1),
             Random(2 * ffn * dim, seed + 2), Random(dim * ffn, seed + 3)};
  }
  int next_set = 0;
  int max_rows = 1;
  for (int m : o.gemm_rows) max_rows = std::max(max_rows, m);
  std::vector<float> x = Random(max_rows * std::max(dim, ffn), 15);
  std::vector<float> y(max_rows * std::max(qd + 2 * kvd, 2 * ffn));
  auto v2 = [](const float* p, int64_t r, int64_t cols) {
    return TensorView::Contiguous(const_cast<float*>(p), DType::kF32, {r, cols});
  };
  for (int m : o.gemm_rows) {
    if (m <= 0) continue;
    ASSIGN_OR_RETURN(double t, Typical(o.runs, [&]() -> absl::Status {
      const LayerW& w = lw[next_set];
      next_set = (next_set + 1) % sets;
      RETURN_IF_ERROR(kernels::Gemm(v2(x.data(), m, dim), v2(w.wqkv.data(), qd + 2 * kvd, dim),
                                    true, v2(y.data(), m, qd + 2 * kvd)));
      RETURN_IF_ERROR(kernels::Gemm(v2(x.data(), m, qd), v2(w.wo.data(), dim, qd), true,
                                    v2(y.data(), m, dim)));
      RETURN_IF_ERROR(kernels::Gemm(v2(x.data(), m, dim), v2(w.wgu.data(), 2 * ffn, dim), true,
                                    v2(y.data(), m, 2 * ffn)));
      return kernels::Gemm(v2(x.data(), m, ffn), v2(w.wd.data(), dim, ffn), true,
                           v2(y.data(), m, dim));
    }));
    c->gemm_flops_at_rows.push_back({static_cast<double>(m), 2.0 * m * layer_weights / t});
  }
  std::sort(c->gemm_flops_at_rows.begin(), c->gemm_flops_at_rows.end());
  // 2. Attention: rows spread evenly over the keys (exact causal mask).
  {
    const int64_t rows = o.attention_rows, keys = o.attention_keys;
    const std::vector<float> q = Random(rows * qd, 21), k = Random(s.kv_heads * keys * hd, 22),
                             v = Random(s.kv_heads * keys * hd, 23);
    std::vector<float> out(rows * qd);
    std::vector<int32_t> pos(rows);
    double visible = 0;
    for (int64_t r = 0; r < rows; ++r) {
      pos[r] = static_cast<int32_t>((r * keys) / rows + (keys / rows) / 2);
      visible += pos[r] + 1;
    }
    kernels::AttentionParams ap;
    ap.num_heads = s.heads;
    ap.num_kv_heads = s.kv_heads;
    ap.head_dim = s.head_dim;
    auto q3 = TensorView::Contiguous(const_cast<float*>(q.data()), DType::kF32, {rows, s.heads, hd});
    auto o3 = TensorView::Contiguous(out.data(), DType::kF32, {rows, s.heads, hd});
    auto k3 = TensorView::Contiguous(const_cast<float*>(k.data()), DType::kF32, {s.kv_heads, keys, hd});
    auto v3 = TensorView::Contiguous(const_cast<float*>(v.data()), DType::kF32, {s.kv_heads, keys, hd});
    ASSIGN_OR_RETURN(double t, Typical(o.runs, [&] {
      return kernels::SelectiveAttention(q3, pos.data(), k3, v3, o3, ap);
    }));
    c->attention_flops = 4.0 * s.heads * hd * visible / t;
  }
  // 3. Per-row ops of a layer (the bytes of CostModel::RowOpBytes).
  {
    const int64_t rows = o.row_op_rows;
    std::vector<float> h = Random(rows * dim, 31), xb(rows * dim), nw(dim, 1.0f);
    std::vector<float> qk = Random(rows * (qd + kvd), 32), gu = Random(rows * 2 * ffn, 33);
    std::vector<float> kvsrc = Random(rows * 2 * kvd, 34), kvdst(rows * 2 * kvd);
    std::vector<int32_t> pos(rows);
    for (int64_t r = 0; r < rows; ++r) pos[r] = static_cast<int32_t>(r);
    kernels::RopeParams rp;
    rp.head_dim = s.head_dim;
    const auto wv = TensorView::Contiguous(nw.data(), DType::kF32, {dim});
    ASSIGN_OR_RETURN(double t, Typical(o.runs, [&]() -> absl::Status {
      for (int i = 0; i < 2; ++i) {
        RETURN_IF_ERROR(kernels::RmsNorm(v2(h.data(), rows, dim), wv, 1e-5f,
                                         v2(xb.data(), rows, dim)));
      }
      RETURN_IF_ERROR(kernels::ApplyRope(
          TensorView::Contiguous(qk.data(), DType::kF32, {rows, s.heads + s.kv_heads, hd}),
          pos.data(), rp));
      TensorView gate = v2(gu.data(), rows, ffn), up = v2(gu.data() + ffn, rows, ffn);
      gate.stride[0] = up.stride[0] = 2 * ffn;
      RETURN_IF_ERROR(kernels::SwiGlu(gate, up, gate));
      std::memcpy(kvdst.data(), kvsrc.data(), kvsrc.size() * sizeof(float));
      return absl::OkStatus();
    }));
    const double q = static_cast<double>(qd), kv = static_cast<double>(kvd);
    const double bytes = 4.0 * (4.0 * dim + 2.0 * (q + kv) + 3.0 * ffn + 4.0 * kv) * rows;
    c->row_op_bytes_per_s = bytes / t;
  }
  // 4. Re-rotation of cached keys by an offset.
  {
    const int64_t keys = o.attention_keys;
    std::vector<float> k = Random(s.kv_heads * keys * hd, 41);
    kernels::RopeParams rp;
    rp.head_dim = s.head_dim;
    auto k3 = TensorView::Contiguous(k.data(), DType::kF32, {s.kv_heads, keys, hd});
    ASSIGN_OR_RETURN(double t, Typical(o.runs, [&] { return kernels::RerotateKeys(k3, 512, rp); }));
    c->rerotate_bytes_per_s = static_cast<double>(k.size()) * 4 / t;
  }
  // 5. A fresh zero-filled f32 buffer (the fused cache: KVCache::Create).
  if (o.alloc_bytes > 0) {
    double sink = 0;
    ASSIGN_OR_RETURN(double t, Typical(o.runs, [&] {
      std::vector<float> buf(o.alloc_bytes / sizeof(float), 0.0f);
      sink += buf[buf.size() / 2];
      return absl::OkStatus();
    }));
    if (sink != 0) return absl::InternalError("MeasureCpu: allocation not zero-filled");
    c->alloc_bytes_per_s = static_cast<double>(o.alloc_bytes) / t;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CpuCeilings> MeasureCpu(const CpuMeasureOptions& o) {
  if (o.gemm_n <= 0 || o.runs <= 0 || o.copy_bytes == 0) {
    return absl::InvalidArgumentError("MeasureCpu: gemm_n, runs and copy_bytes must be positive");
  }
  CpuCeilings c;
  c.gemm_n = o.gemm_n;
  const int64_t n = o.gemm_n;
  std::vector<float> a(n * n), b(n * n), d(n * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  auto va = kernels::TensorView::Contiguous(a.data(), kernels::DType::kF32, {n, n});
  auto vb = kernels::TensorView::Contiguous(b.data(), kernels::DType::kF32, {n, n});
  auto vd = kernels::TensorView::Contiguous(d.data(), kernels::DType::kF32, {n, n});
  RETURN_IF_ERROR(kernels::Gemm(va, vb, false, vd));  // warm-up
  double best = 1e30;
  for (int r = 0; r < o.runs; ++r) {
    const Clock::time_point t0 = Clock::now();
    RETURN_IF_ERROR(kernels::Gemm(va, vb, false, vd));
    best = std::min(best, SecondsSince(t0));
  }
  c.sgemm_flops = 2.0 * n * n * n / best;

  std::vector<char> src(o.copy_bytes, 1), dst(o.copy_bytes, 0);
  std::memcpy(dst.data(), src.data(), src.size());  // fault in
  best = 1e30;
  for (int r = 0; r < o.runs; ++r) {
    src[r] = static_cast<char>(r);
    const Clock::time_point t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    best = std::min(best, SecondsSince(t0));
  }
  if (dst[0] == 42) c.gemm_n = o.gemm_n;  // keep the copy observable
  c.copy_bytes_per_s = static_cast<double>(o.copy_bytes) / best;
  c.file_read_bytes_per_s = MeasureFileRead(o.file_bytes, o.scratch_dir);
  if (o.model.layers > 0) RETURN_IF_ERROR(MeasureModelKernels(o, &c));
  return c;
}

CpuCeilings MedianCeilings(const std::vector<CpuCeilings>& samples) {
  CpuCeilings out;
  if (samples.empty()) return out;
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const CpuCeilings& c : samples) v.push_back(field(c));
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  out.gemm_n = samples.front().gemm_n;
  out.sgemm_flops = med([](const CpuCeilings& c) { return c.sgemm_flops; });
  out.copy_bytes_per_s = med([](const CpuCeilings& c) { return c.copy_bytes_per_s; });
  out.file_read_bytes_per_s = med([](const CpuCeilings& c) { return c.file_read_bytes_per_s; });
  out.attention_flops = med([](const CpuCeilings& c) { return c.attention_flops; });
  out.row_op_bytes_per_s = med([](const CpuCeilings& c) { return c.row_op_bytes_per_s; });
  out.rerotate_bytes_per_s = med([](const CpuCeilings& c) { return c.rerotate_bytes_per_s; });
  out.alloc_bytes_per_s = med([](const CpuCeilings& c) { return c.alloc_bytes_per_s; });
  for (size_t i = 0; i < samples.front().gemm_flops_at_rows.size(); ++i) {
    out.gemm_flops_at_rows.push_back(
        {samples.front().gemm_flops_at_rows[i].first, med([i](const CpuCeilings& c) {
           return i < c.gemm_flops_at_rows.size() ? c.gemm_flops_at_rows[i].second : 0.0;
         })});
  }
  return out;
}

std::string DescribeKernelRates(const CpuCeilings& c) {
  std::string gemm;
  for (const auto& [rows, flops] : c.gemm_flops_at_rows) {
    absl::StrAppend(&gemm, gemm.empty() ? "" : ", ", static_cast<int64_t>(rows), ":",
                    absl::StrFormat("%.1f", flops / 1e9));
  }
  return absl::StrFormat(
      "layer GEMM GFLOP/s by rows {%s}; attention %.1f GFLOP/s; row ops %.2f GB/s; "
      "re-rotation %.2f GB/s; alloc+zero %.2f GB/s",
      gemm, c.attention_flops / 1e9, c.row_op_bytes_per_s / 1e9, c.rerotate_bytes_per_s / 1e9,
      c.alloc_bytes_per_s / 1e9);
}

HardwareSpec CpuHardwareSpec(const CpuCeilings& c, double efficiency,
                                    double remote_bytes_per_s) {
  HardwareSpec h;
  h.name = "cpu";
  h.peak_flops = c.sgemm_flops * efficiency;
  h.mem_bw = c.copy_bytes_per_s;
  h.ram_tier_bw = c.copy_bytes_per_s;
  h.ssd_tier_bw = c.file_read_bytes_per_s > 0 ? c.file_read_bytes_per_s : c.copy_bytes_per_s / 4;
  h.remote_tier_bw = remote_bytes_per_s > 0 ? remote_bytes_per_s : c.copy_bytes_per_s / 4;
  h.layer_overhead_s = 0;
  h.gemm_flops_at_rows = c.gemm_flops_at_rows;
  h.attention_flops = c.attention_flops;
  h.row_op_bytes_per_s = c.row_op_bytes_per_s;
  h.rerotate_bytes_per_s = c.rerotate_bytes_per_s;
  h.alloc_bytes_per_s = c.alloc_bytes_per_s;
  return h;
}

absl::StatusOr<ModelShape> ResolveModelShape(const std::string& model, bool f32,
                                                    int kv_bytes) {
  absl::StatusOr<ModelShape> preset = ModelPreset(model);
  if (preset.ok()) {
    if (f32) {
      preset->weight_bytes_per_elem = 4;
      preset->kv_bytes_per_elem = 4;
    }
    return preset;
  }
  const bool looks_like_path = absl::StartsWith(model, "synthetic:") ||
                               absl::StrContains(model, "/") || absl::StrContains(model, ".");
  if (!looks_like_path) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model preset '", model, "' (presets: ",
                     absl::StrJoin(ModelPresetNames(), ", "),
                     "; or a checkpoint path / synthetic:... spec)"));
  }
  ASSIGN_OR_RETURN(model::ModelParts parts, model::LoadModelParts(model));
  return ShapeOfConfig(parts.config, model, 4, f32 ? 4 : kv_bytes);
}

ModelShape ShapeOfConfig(const model::ModelConfig& c, const std::string& name,
                         int weight_bytes_per_elem, int kv_bytes_per_elem) {
  ModelShape s;
  s.name = name;
  s.layers = c.n_layers;
  s.dim = c.dim;
  s.heads = c.n_heads;
  s.kv_heads = c.n_kv_heads;
  s.head_dim = c.head_dim;
  s.ffn = c.hidden_dim;
  s.vocab = c.vocab_size;
  s.weight_bytes_per_elem = weight_bytes_per_elem;
  s.kv_bytes_per_elem = kv_bytes_per_elem;
  return s;
}

}  // namespace ragkv::blend
