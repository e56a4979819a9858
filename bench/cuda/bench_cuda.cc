// bench_cuda.cc: microbenchmark of the kernels/cuda kernels (not a test).
//
//   ragkv_cuda_bench [--quick] [--section=all|attention-tc|attention-simt|memory]
//
// (scripts/gpu-check runs the sections as separate processes, so that a
// kernel fault in one does not hide the figures of the others.)
// Prints, per kernel, the median time of repeated launches (CUDA events,
// after warm-up) and the achieved rate against the device's ceilings:
//  - selective attention: TFLOP/s = 4 * head_dim * sum over (row, head) of
//    visible keys / time (QK^T and PV, 2 flops per multiply-add; masked work
//    not counted), vs the H200's dense bf16 peak (989 TFLOP/s datasheet);
//  - re-rotation, deviation, paged scatter: GB/s of compulsory traffic (each
//    byte read once + written once) vs HBM (4.8 TB/s datasheet) and vs a
//    measured device-to-device cudaMemcpy.
// Also cross-checks the tensor-core attention against the SIMT kernel on the
// largest shape (max abs difference), so a wrong fast kernel is visible here.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/convert.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/deviation.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/rope.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::cuda {
namespace {

constexpr double kPeakBf16Tflops = 989.0;  // H200 SXM dense bf16, datasheet
constexpr double kHbmGBs = 4800.0;         // H200 HBM3e, datasheet

#define CHECK_CUDA(expr)                                                                    \
  do {                                                                                      \
    cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define CHECK_OK(expr)                                                                       \
  do {                                                                                       \
    absl::Status s_ = (expr);                                                                \
    if (!s_.ok()) {                                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

void* DevAlloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  return p;
}

// Random bf16/f16 data generated on the host in blocks and replicated.
void FillDevice(void* d, size_t elems, DType t, std::mt19937& rng, float scale = 1.0f) {
  const size_t block = std::min<size_t>(elems, 1 << 20);
  std::vector<uint16_t> h(block);
  std::normal_distribution<float> nd(0.f, scale);
  for (auto& x : h) x = t == DType::kF16 ? FloatToHalf(nd(rng)) : FloatToBf16(nd(rng));
  for (size_t off = 0; off < elems; off += block) {
    const size_t n = std::min(block, elems - off);
    CHECK_CUDA(cudaMemcpy(static_cast<uint16_t*>(d) + off, h.data(), n * 2, cudaMemcpyHostToDevice));
  }
}

// Median milliseconds of `fn` over `reps` timed runs after `warmup` runs.
double TimeMs(cudaStream_t s, int warmup, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  CHECK_CUDA(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a, s));
    fn();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct AttnResult {
  double ms = 0, tflops = 0;
};

// One request: kv_len keys, `rows` scattered query rows (random distinct
// positions, sorted), H heads, KVH kv heads, head_dim D.
AttnResult BenchAttention(cudaStream_t s, DType t, int kv_len, int rows, int H, int KVH, int D,
                          AttentionAlgo algo, int batch, std::mt19937& rng, double* max_diff_vs_simt,
                          int reps) {
  std::vector<int32_t> q_indptr = {0}, kv_indptr = {0}, positions;
  double visible = 0;
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> all(kv_len);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> pos(all.begin(), all.begin() + rows);
    std::sort(pos.begin(), pos.end());
    for (int p : pos) visible += p + 1;
    positions.insert(positions.end(), pos.begin(), pos.end());
    q_indptr.push_back(q_indptr.back() + rows);
    kv_indptr.push_back(kv_indptr.back() + kv_len);
  }
  const int64_t total_rows = q_indptr.back(), total_kv = kv_indptr.back();
  AttentionConfig cfg;
  cfg.num_heads = H;
  cfg.num_kv_heads = KVH;
  cfg.head_dim = D;
  cfg.dtype = t;
  cfg.algo = algo;
  auto plan = SelectiveAttentionPlan::Create(cfg, q_indptr, kv_indptr);
  CHECK_OK(plan.status());
  const size_t qn = total_rows * H * D, kn = static_cast<size_t>(KVH) * total_kv * D;
  void* q = DevAlloc(qn * 2);
  void* k = DevAlloc(kn * 2);
  void* v = DevAlloc(kn * 2);
  void* out = DevAlloc(qn * 2);
  void* pos = DevAlloc(positions.size() * 4);
  void* ws = DevAlloc(plan->workspace_bytes());
  FillDevice(q, qn, t, rng);
  FillDevice(k, kn, t, rng);
  FillDevice(v, kn, t, rng);
  CHECK_CUDA(cudaMemcpy(pos, positions.data(), positions.size() * 4, cudaMemcpyHostToDevice));
  CHECK_OK(plan->Upload(ws, plan->workspace_bytes(), s));
  SelectiveAttentionArgs args;
  args.q = TensorView::Contiguous(q, t, {total_rows, H, D});
  args.k = TensorView::Contiguous(k, t, {KVH, total_kv, D});
  args.v = TensorView::Contiguous(v, t, {KVH, total_kv, D});
  args.out = TensorView::Contiguous(out, t, {total_rows, H, D});
  args.positions = static_cast<const int32_t*>(pos);
  AttnResult r;
  r.ms = TimeMs(s, 2, reps, [&] { CHECK_OK(plan->Run(args, ws, plan->workspace_bytes(), s)); });
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(s));
  r.tflops = 4.0 * D * H * visible / (r.ms * 1e-3) / 1e12;
  if (max_diff_vs_simt != nullptr) {
    AttentionConfig c2 = cfg;
    c2.algo = AttentionAlgo::kSimt;
    auto plan2 = SelectiveAttentionPlan::Create(c2, q_indptr, kv_indptr);
    CHECK_OK(plan2.status());
    void* out2 = DevAlloc(qn * 2);
    SelectiveAttentionArgs a2 = args;
    a2.out = TensorView::Contiguous(out2, t, {total_rows, H, D});
    CHECK_OK(plan2->Run(a2, ws, plan->workspace_bytes(), s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<uint16_t> h1(qn), h2(qn);
    CHECK_CUDA(cudaMemcpy(h1.data(), out, qn * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(h2.data(), out2, qn * 2, cudaMemcpyDeviceToHost));
    double md = 0;
    for (size_t i = 0; i < qn; ++i) {
      const float a = t == DType::kF16 ? HalfToFloat(h1[i]) : Bf16ToFloat(h1[i]);
      const float b = t == DType::kF16 ? HalfToFloat(h2[i]) : Bf16ToFloat(h2[i]);
      const double d = std::fabs(double(a) - double(b));
      md = std::isfinite(d) ? std::max(md, d) : INFINITY;
    }
    *max_diff_vs_simt = md;
    CHECK_CUDA(cudaFree(out2));
  }
  for (void* p : {q, k, v, out, pos, ws}) CHECK_CUDA(cudaFree(p));
  return r;
}

// CopyCeilingGBs: the ceiling of the memory-bound kernels: a device-to-device
// copy, bytes read + written, in GB/s (printed).
double CopyCeilingGBs(cudaStream_t s, int reps) {
  const size_t copy_bytes = size_t{1} << 30;
  void* c0 = DevAlloc(copy_bytes);
  void* c1 = DevAlloc(copy_bytes);
  CHECK_CUDA(cudaMemset(c0, 1, copy_bytes));
  const double copy_ms = TimeMs(s, 2, reps, [&] {
    CHECK_CUDA(cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice, s));
  });
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("ceiling: D2D cudaMemcpy %.0f GB/s (read+write), datasheet HBM %.0f GB/s\n",
              copy_gbs, kHbmGBs);
  CHECK_CUDA(cudaFree(c0));
  CHECK_CUDA(cudaFree(c1));
  return copy_gbs;
}

// AttentionSection: selective attention on tensor cores (`run_tc`) and on
// the SIMT kernel (`run_simt`); the header line is printed either way.
void AttentionSection(cudaStream_t s, std::mt19937& rng, int reps, bool run_tc, bool run_simt) {
  std::printf("\n%-64s %10s %10s %8s\n", "selective attention (exact causal)", "ms", "TFLOP/s",
              "%peak");
  struct A { DType t; int kv, rows, H, KVH, D, batch; AttentionAlgo algo; bool check; };
  std::vector<A> cases = {
      {DType::kBF16, 8192, 2048, 32, 8, 128, 1, AttentionAlgo::kTensorCore, true},
      {DType::kF16, 8192, 2048, 32, 8, 128, 1, AttentionAlgo::kTensorCore, false},
      {DType::kBF16, 8192, 1024, 32, 8, 128, 1, AttentionAlgo::kTensorCore, false},
      {DType::kBF16, 8192, 1024, 32, 8, 128, 4, AttentionAlgo::kTensorCore, false},
      {DType::kBF16, 8192, 8192, 32, 8, 128, 1, AttentionAlgo::kTensorCore, false},
      {DType::kBF16, 8192, 2048, 32, 8, 64, 1, AttentionAlgo::kTensorCore, false},
      {DType::kBF16, 8192, 2048, 32, 8, 128, 1, AttentionAlgo::kSimt, false},
  };
  for (const A& a : cases) {
    const bool simt = a.algo == AttentionAlgo::kSimt;
    if ((simt && !run_simt) || (!simt && !run_tc)) continue;
    double md = -1;
    AttnResult r = BenchAttention(s, a.t, a.kv, a.rows, a.H, a.KVH, a.D, a.algo, a.batch, rng,
                                  a.check ? &md : nullptr, simt ? 3 : reps);
    char name[160];
    std::snprintf(name, sizeof(name), "%s kv=%d rows=%d x%d H=%d KVH=%d hd=%d %s", DTypeName(a.t),
                  a.kv, a.rows, a.batch, a.H, a.KVH, a.D,
                  a.algo == AttentionAlgo::kSimt ? "simt" : "tensor-core");
    std::printf("%-64s %10.3f %10.1f %7.1f%%", name, r.ms, r.tflops, 100.0 * r.tflops / kPeakBf16Tflops);
    if (md >= 0) std::printf("  (max |tc - simt| = %.3g)", md);
    std::printf("\n");
  }
}

// MemoryBench: the memory-bound kernels (re-rotation, deviation, top-k, paged
// scatter) on one [8, 131072, 128] K tensor per dtype, reported as GB/s of
// compulsory traffic vs HBM and vs the measured copy.
struct MemoryBench {
  // Re-rotation: 8 kv heads x 131072 tokens x 128, bf16 (256 MiB), 32 chunks.
  static constexpr int heads = 8, tokens = 131072, hd = 128, chunks = 32;
  static constexpr size_t n = size_t{heads} * tokens * hd;

  cudaStream_t s;
  std::mt19937& rng;
  int reps;
  double copy_gbs;  // CopyCeilingGBs

  // Run: every kernel, bf16 and f16 (deviation, top-k, paged scatter: bf16).
  void Run();
  // Rerotate: RerotateKeysByChunk of `k` (chunk offsets `doff`, deltas
  // `ddel` on the device), both RoPE layouts.
  void Rerotate(void* k, DType t, void* doff, void* ddel);
  // Deviation: KvDeviation of `k` and a second random tensor, then TopKRows
  // over its output and PagedScatter of both.
  void Deviation(void* k, DType t);
  // TopKRows: top 15% of n = 8192 and 131072 deviations in `out`.
  void TopKRows(void* out);
  // PagedScatter: 15% of the rows of `a` (K) and `b` (V) into a vLLM layout.
  void PagedScatter(const TensorView& a, const TensorView& b, DType t);
  // report: one row: time and GB/s of `bytes` moved, vs HBM and the copy.
  void report(const char* name, double ms, double bytes) const {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-64s %10.3f %10.0f %7.1f%% %7.1f%%\n", name, ms, gbs, 100 * gbs / kHbmGBs,
                100 * gbs / copy_gbs);
  }
};

void MemoryBench::Run() {
  for (DType t : {DType::kBF16, DType::kF16}) {
    void* k = DevAlloc(n * 2);
    FillDevice(k, n, t, rng);
    std::vector<int32_t> off(chunks + 1), del(chunks);
    for (int c = 0; c <= chunks; ++c) off[c] = c * (tokens / chunks);
    for (int c = 0; c < chunks; ++c) del[c] = 1000 + 37 * c;
    void* doff = DevAlloc(off.size() * 4);
    void* ddel = DevAlloc(del.size() * 4);
    CHECK_CUDA(cudaMemcpy(doff, off.data(), off.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(ddel, del.data(), del.size() * 4, cudaMemcpyHostToDevice));
    Rerotate(k, t, doff, ddel);
    if (t == DType::kBF16) Deviation(k, t);
    CHECK_CUDA(cudaFree(k));
    CHECK_CUDA(cudaFree(doff));
    CHECK_CUDA(cudaFree(ddel));
  }
}

void MemoryBench::Rerotate(void* k, DType t, void* doff, void* ddel) {
  for (RopeLayout l : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
    RopeParams p;
    p.head_dim = hd;
    p.layout = l;
    const TensorView kv = TensorView::Contiguous(k, t, {heads, tokens, hd});
    const double ms = TimeMs(s, 2, reps, [&] {
      CHECK_OK(RerotateKeysByChunk(kv, static_cast<int32_t*>(doff), static_cast<int32_t*>(ddel),
                                   chunks, p, s));
    });
    char name[128];
    std::snprintf(name, sizeof(name), "rerotate %s %s [8,131072,128] 32 chunks", DTypeName(t),
                  l == RopeLayout::kInterleaved ? "interleaved" : "half-split");
    report(name, ms, 2.0 * n * 2);
  }
}

void MemoryBench::Deviation(void* k, DType t) {
  void* k2 = DevAlloc(n * 2);
  FillDevice(k2, n, t, rng);
  void* out = DevAlloc(tokens * 4);
  const TensorView a = TensorView::Contiguous(k, t, {heads, tokens, hd});
  const TensorView b = TensorView::Contiguous(k2, t, {heads, tokens, hd});
  const double ms = TimeMs(s, 2, reps, [&] {
    CHECK_OK(KvDeviation(a, b, static_cast<float*>(out), false, s));
  });
  report("kv deviation bf16 [8,131072,128] x2 inputs", ms, 2.0 * n * 2 + tokens * 4.0);
  TopKRows(out);
  PagedScatter(a, b, t);
  for (void* p : {k2, out}) CHECK_CUDA(cudaFree(p));
}

void MemoryBench::TopKRows(void* out) {
  // Top-k over the deviations: 15% of 131072 and of 8192.
  for (int nn : {8192, tokens}) {
    auto wsb = TopKWorkspaceBytes(nn);
    CHECK_OK(wsb.status());
    void* ws = DevAlloc(*wsb);
    void* idx = DevAlloc(nn * 4);
    const int kk = nn * 15 / 100;
    const double tms = TimeMs(s, 2, reps, [&] {
      CHECK_OK(TopK(static_cast<float*>(out), nn, kk, static_cast<int32_t*>(idx), ws, *wsb, s));
    });
    std::printf("%-64s %10.3f\n", (std::string("top-k (CUB radix sort) n=") + std::to_string(nn) +
                                   " k=" + std::to_string(kk)).c_str(), tms);
    CHECK_CUDA(cudaFree(ws));
    CHECK_CUDA(cudaFree(idx));
  }
}

void MemoryBench::PagedScatter(const TensorView& a, const TensorView& b, DType t) {
  // Paged scatter of 15% of the rows of K and V into a vLLM layout.
  const int nrows = tokens * 15 / 100, bs = 16, max_blocks = tokens / bs;
  std::vector<int32_t> rows(tokens);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(nrows);
  std::vector<int32_t> table(max_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  void* drows = DevAlloc(nrows * 4);
  void* dtable = DevAlloc(max_blocks * 4);
  CHECK_CUDA(cudaMemcpy(drows, rows.data(), nrows * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dtable, table.data(), max_blocks * 4, cudaMemcpyHostToDevice));
  void* kc = DevAlloc(n * 2);
  void* vc = DevAlloc(n * 2);
  PagedKvCache cache;
  cache.k_cache = kc;
  cache.v_cache = vc;
  cache.dtype = t;
  cache.num_blocks = max_blocks;
  cache.block_size = bs;
  cache.num_kv_heads = heads;
  cache.head_dim = hd;
  BlockTable bt{static_cast<int32_t*>(dtable), 1, max_blocks};
  PagedRows pr{static_cast<int32_t*>(drows), nullptr, static_cast<int32_t*>(drows), nrows, nullptr};
  const double pms = TimeMs(s, 2, reps, [&] { CHECK_OK(ScatterRowsToPaged(a, b, pr, cache, bt, s)); });
  report("paged scatter bf16 15% of 131072 rows, K+V, bs 16", pms, 2.0 * 2 * nrows * heads * hd * 2);
  for (void* p : {drows, dtable, kc, vc}) CHECK_CUDA(cudaFree(p));
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::string section = "all";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strncmp(argv[i], "--section=", 10) == 0) section = argv[i] + 10;
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--section=all|attention-tc|attention-simt|memory]\n", argv[0]);
      return 2;
    }
  }
  const bool run_tc = section == "all" || section == "attention-tc";
  const bool run_simt = section == "all" || section == "attention-simt";
  const bool run_memory = section == "all" || section == "memory";
  CHECK_OK(CudaAvailable());
  auto info = QueryDevice();
  CHECK_OK(info.status());
  std::printf("device: %s, cc %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", info->name.c_str(),
              info->compute_major, info->compute_minor, info->sm_count,
              info->global_mem_bytes / double(1 << 30), info->l2_cache_bytes / double(1 << 20));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  std::mt19937 rng(12345);
  const int reps = quick ? 5 : 20;

  const double copy_gbs = CopyCeilingGBs(s, reps);
  AttentionSection(s, rng, reps, run_tc, run_simt);
  std::printf("\n%-64s %10s %10s %8s %8s\n", "memory-bound kernels", "ms", "GB/s", "%HBM", "%copy");
  if (run_memory) MemoryBench{s, rng, reps, copy_gbs}.Run();
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("\npeaks used: dense bf16 %.0f TFLOP/s (datasheet; ~790 measured for cuBLAS-class GEMM "
              "here), HBM %.0f GB/s (datasheet)\n", kPeakBf16Tflops, kHbmGBs);
  return 0;
}

}  // namespace
}  // namespace ragkv::kernels::cuda

int main(int argc, char** argv) { return ragkv::kernels::cuda::Main(argc, argv); }
