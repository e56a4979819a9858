#include "services/plan_cmd.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "base/status_macros.h"
#include "kernels/gemm.h"
#include "model/loader.h"

namespace ragkv::services {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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
    const double t0 = Now();
    size_t got = 0;
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) got += static_cast<size_t>(n);
    const double dt = Now() - t0;
    if (got == bytes && dt > 0) bw = static_cast<double>(got) / dt;
  }
  ::close(fd);
  ::unlink(tmpl.data());
  return bw;
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
    const double t0 = Now();
    RETURN_IF_ERROR(kernels::Gemm(va, vb, false, vd));
    best = std::min(best, Now() - t0);
  }
  c.sgemm_flops = 2.0 * n * n * n / best;

  std::vector<char> src(o.copy_bytes, 1), dst(o.copy_bytes, 0);
  std::memcpy(dst.data(), src.data(), src.size());  // fault in
  best = 1e30;
  for (int r = 0; r < o.runs; ++r) {
    src[r] = static_cast<char>(r);
    const double t0 = Now();
    std::memcpy(dst.data(), src.data(), src.size());
    best = std::min(best, Now() - t0);
  }
  if (dst[0] == 42) c.gemm_n = o.gemm_n;  // keep the copy observable
  c.copy_bytes_per_s = static_cast<double>(o.copy_bytes) / best;
  c.file_read_bytes_per_s = MeasureFileRead(o.file_bytes, o.scratch_dir);
  return c;
}

blend::HardwareSpec CpuHardwareSpec(const CpuCeilings& c, double efficiency,
                                    double remote_bytes_per_s) {
  blend::HardwareSpec h;
  h.name = "cpu";
  h.peak_flops = c.sgemm_flops * efficiency;
  h.mem_bw = c.copy_bytes_per_s;
  h.ram_tier_bw = c.copy_bytes_per_s;
  h.ssd_tier_bw = c.file_read_bytes_per_s > 0 ? c.file_read_bytes_per_s : c.copy_bytes_per_s / 4;
  h.remote_tier_bw = remote_bytes_per_s > 0 ? remote_bytes_per_s : c.copy_bytes_per_s / 4;
  h.layer_overhead_s = 0;
  return h;
}

absl::StatusOr<blend::ModelShape> ResolveModelShape(const std::string& model, bool f32,
                                                    int kv_bytes) {
  absl::StatusOr<blend::ModelShape> preset = blend::ModelPreset(model);
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
                     absl::StrJoin(blend::ModelPresetNames(), ", "),
                     "; or a checkpoint path / synthetic:... spec)"));
  }
  ASSIGN_OR_RETURN(model::ModelParts parts, model::LoadModelParts(model));
  const model::ModelConfig& c = parts.config;
  blend::ModelShape s;
  s.name = model;
  s.layers = c.n_layers;
  s.dim = c.dim;
  s.heads = c.n_heads;
  s.kv_heads = c.n_kv_heads;
  s.head_dim = c.head_dim;
  s.ffn = c.hidden_dim;
  s.vocab = c.vocab_size;
  s.weight_bytes_per_elem = 4;
  s.kv_bytes_per_elem = f32 ? 4 : kv_bytes;
  return s;
}

absl::StatusOr<blend::Plan> RunPlanCommand(const PlanCommandOptions& o, std::ostream& out) {
  blend::HardwareSpec hw;
  if (o.calibrate_cpu) {
    ASSIGN_OR_RETURN(CpuCeilings c, MeasureCpu());
    hw = CpuHardwareSpec(c, o.cpu_efficiency);
    if (!o.json) {
      out << "# cpu calibration: sgemm " << c.sgemm_flops / 1e9 << " GFLOP/s (n=" << c.gemm_n
          << ", x efficiency " << o.cpu_efficiency << "), memcpy " << c.copy_bytes_per_s / 1e9
          << " GB/s, cold file read " << c.file_read_bytes_per_s / 1e9 << " GB/s\n";
    }
  } else {
    absl::StatusOr<blend::HardwareSpec> p = blend::HardwarePreset(o.hardware);
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown hardware preset '", o.hardware, "' (presets: ",
                       absl::StrJoin(blend::HardwarePresetNames(), ", "), ", or --calibrate-cpu)"));
    }
    hw = *p;
  }
  if (o.peak_tflops > 0) hw.peak_flops = o.peak_tflops * 1e12;
  if (o.hbm_gbs > 0) hw.mem_bw = o.hbm_gbs * 1e9;
  if (o.host_gbs > 0) hw.ram_tier_bw = o.host_gbs * 1e9;
  if (o.nvme_gbs > 0) hw.ssd_tier_bw = o.nvme_gbs * 1e9;
  if (o.net_gbs > 0) hw.remote_tier_bw = o.net_gbs * 1e9;
  if (o.layer_overhead_us >= 0) hw.layer_overhead_s = o.layer_overhead_us * 1e-6;
  ASSIGN_OR_RETURN(blend::ModelShape shape, ResolveModelShape(o.model, o.calibrate_cpu));
  const blend::PlanWorkload& w = o.workload;
  if (w.chunks <= 0 || w.chunk_tokens <= 0 || w.query_tokens <= 0) {
    return absl::InvalidArgumentError("plan: --chunks, --chunk-tokens, --query-tokens must be > 0");
  }
  if (!(w.r_min >= 0 && w.r_min <= w.r_max && w.r_max <= 1)) {
    return absl::InvalidArgumentError("plan: need 0 <= r_min <= r_max <= 1");
  }
  blend::Plan plan = blend::MakePlan(shape, hw, w);
  if (o.json) {
    blend::PrintPlanJson(plan, out);
  } else {
    blend::PrintPlanTable(plan, out);
  }
  return plan;
}

}  // namespace ragkv::services
