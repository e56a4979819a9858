// kernels_bench.cc: Google Benchmark suite for the CPU kernels (kernels/).
//
// Every kernel reports its achieved rate (GFLOP/s for compute kernels, GB/s
// of compulsory DRAM/L3 traffic for streaming kernels) and its arithmetic
// intensity. The same run measures the two ceilings: OpenBLAS sgemm GFLOP/s
// (BM_Ceiling_Sgemm) and a STREAM-style copy (BM_Ceiling_Copy, bytes read +
// written). With --roofline the binary prints a markdown roofline table
// (kernel, arithmetic intensity, achieved, ceiling, % of ceiling) after the
// normal output; docs/benchmarks.md holds one such table.
//
// Flags: --threads=N caps OpenMP/OpenBLAS threads (default: all hardware
// threads); all Google Benchmark flags work (--benchmark_filter=...).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/cpu.h"
#include "kernels/deviation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/quant.h"
#include "kernels/rope.h"

namespace ragkv::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Counters: "GFLOP/s" / "GB/s" as rates, "AI" = flop per byte.
void SetRates(benchmark::State& st, double flops_per_iter, double bytes_per_iter) {
  const double it = static_cast<double>(st.iterations());
  if (flops_per_iter > 0)
    st.counters["GFLOP/s"] = benchmark::Counter(flops_per_iter * it / 1e9,
                                                benchmark::Counter::kIsRate);
  if (bytes_per_iter > 0)
    st.counters["GB/s"] = benchmark::Counter(bytes_per_iter * it / 1e9, benchmark::Counter::kIsRate);
  st.counters["AI"] = bytes_per_iter > 0 ? flops_per_iter / bytes_per_iter : 0.0;
  st.counters["threads"] = MaxThreads();
}

#define CHECK_OK(expr)                                              \
  do {                                                              \
    absl::Status s_ = (expr);                                       \
    if (!s_.ok()) st.SkipWithError(s_.ToString().c_str());          \
  } while (0)

// ------------------------------------------------------------- ceilings

void BM_Ceiling_Sgemm(benchmark::State& st) {
  const int64_t n = st.range(0);
  auto a = Random(n * n, 1), b = Random(n * n, 2);
  std::vector<float> c(n * n);
  for (auto _ : st) {
    CHECK_OK(Gemm(TensorView::Contiguous(a.data(), DType::kF32, {n, n}),
                  TensorView::Contiguous(b.data(), DType::kF32, {n, n}), true,
                  TensorView::Contiguous(c.data(), DType::kF32, {n, n})));
    benchmark::DoNotOptimize(c.data());
  }
  SetRates(st, 2.0 * n * n * n, 3.0 * n * n * 4);
}
BENCHMARK(BM_Ceiling_Sgemm)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);

// STREAM "copy": c = a over 2 x 256 MiB (beyond any last-level cache), one
// memcpy per OpenMP thread; counts bytes read + written (as STREAM does).
void BM_Ceiling_Copy(benchmark::State& st) {
  const int64_t n = st.range(0);
  std::vector<float> a(n, 1.0f), c(n, 0.0f);
  const int threads = MaxThreads();
  for (auto _ : st) {
    const float* pa = a.data();
    float* pc = c.data();
#pragma omp parallel num_threads(threads)
    {
      const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t begin = n * id / nt, end = n * (id + 1) / nt;
      std::memcpy(pc + begin, pa + begin, sizeof(float) * (end - begin));
    }
    benchmark::DoNotOptimize(pc);
    benchmark::ClobberMemory();
  }
  SetRates(st, 0, 2.0 * n * 4);
}
BENCHMARK(BM_Ceiling_Copy)->Arg(int64_t{64} << 20)->UseRealTime()->Unit(benchmark::kMillisecond);

// ------------------------------------------------------------- attention

// args: kv_len, rows, head_dim, num_heads, num_kv_heads, mode (0 scattered,
// 1 full prefill, 2 last rows, 3 a blend's rows: rows - 32 scattered over
// [256, kv_len - 32) -- the first 256-token chunk is exact -- and the last 32,
// the query)
void BM_Attention(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0));
  const int rows = static_cast<int>(st.range(1));
  const int D = static_cast<int>(st.range(2));
  const int H = static_cast<int>(st.range(3));
  const int KVH = static_cast<int>(st.range(4));
  const int mode = static_cast<int>(st.range(5));
  std::vector<int32_t> pos(rows);
  if (mode == 3) {
    std::vector<int32_t> mid(n - 32 - 256);
    std::iota(mid.begin(), mid.end(), 256);
    std::shuffle(mid.begin(), mid.end(), std::mt19937(7));
    std::copy(mid.begin(), mid.begin() + (rows - 32), pos.begin());
    for (int r = 0; r < 32; ++r) pos[rows - 32 + r] = n - 32 + r;
  } else if (mode == 0) {
    std::vector<int32_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), std::mt19937(7));
    std::copy(all.begin(), all.begin() + rows, pos.begin());
  } else {
    for (int r = 0; r < rows; ++r) pos[r] = n - rows + r;
  }
  auto q = Random(static_cast<size_t>(rows) * H * D, 1);
  auto k = Random(static_cast<size_t>(KVH) * n * D, 2);
  auto v = Random(static_cast<size_t>(KVH) * n * D, 3);
  std::vector<float> out(q.size());
  AttentionParams p;
  p.num_heads = H;
  p.num_kv_heads = KVH;
  p.head_dim = D;
  for (auto _ : st) {
    CHECK_OK(SelectiveAttention(TensorView::Contiguous(q.data(), DType::kF32, {rows, H, D}),
                                pos.data(), TensorView::Contiguous(k.data(), DType::kF32, {KVH, n, D}),
                                TensorView::Contiguous(v.data(), DType::kF32, {KVH, n, D}),
                                TensorView::Contiguous(out.data(), DType::kF32, {rows, H, D}), p));
    benchmark::DoNotOptimize(out.data());
  }
  double visible = 0;
  for (int32_t x : pos) visible += x + 1.0;
  const double flops = 4.0 * D * H * visible;  // QK^T + PV, 2 flop per MAC
  const double bytes = 4.0 * (2.0 * q.size() + 2.0 * KVH * (*std::max_element(pos.begin(), pos.end()) + 1.0) * D);
  SetRates(st, flops, bytes);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"N", "rows", "hd", "H", "KVH", "mode"})
    ->Args({4096, 512, 128, 8, 2, 0})    // CacheBlend recompute: 12.5% scattered rows
    ->Args({4096, 512, 128, 8, 8, 0})    // same, no GQA
    ->Args({2048, 2048, 128, 8, 2, 1})   // full prefill
    ->Args({4096, 1, 128, 32, 8, 2})     // decode step
    ->Args({4096, 512, 64, 8, 2, 0})     // head_dim 64
    // The planner's CPU validation shapes (docs/planner_cpu_validation.md):
    // 6 x 256 + 32 tokens, the full prefill, a blend's layer 0 (every row
    // past the exact first chunk) and a later layer at r = 0.15 (192 + 32).
    ->Args({1568, 1568, 64, 8, 8, 1})    // F1 (8 heads, no GQA)
    ->Args({1568, 1312, 64, 8, 8, 2})
    ->Args({1568, 224, 64, 8, 8, 3})
    ->Args({1568, 1568, 64, 16, 4, 1})   // F2 (16 heads / 4 KV)
    ->Args({1568, 1312, 64, 16, 4, 2})
    ->Args({1568, 224, 64, 16, 4, 3})
    ->Args({1568, 1568, 128, 16, 8, 1})  // head_dim 128 (H3: 16 heads / 8 KV)
    ->Args({1568, 1312, 128, 16, 8, 2})
    ->Args({1568, 224, 128, 16, 8, 3})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ------------------------------------------------------------- streaming kernels

// RerotateKeys of a [8, 32768, 128] key tensor (128 MiB in f32, 64 MiB in
// f16: streamed from DRAM, not cache); arg: dtype (0 f32, 1 f16, 2 bf16).
void BM_RerotateKeys(benchmark::State& st) {
  const DType dt = static_cast<DType>(st.range(0));
  const int64_t heads = 8, tokens = 32768, D = 128, n = heads * tokens * D;
  auto f = Random(n, 4);
  std::vector<uint16_t> h(n);
  void* data = f.data();
  if (dt != DType::kF32) {
    CHECK_OK(Convert(TensorView::Contiguous(f.data(), DType::kF32, {n}),
                     TensorView::Contiguous(h.data(), dt, {n})));
    data = h.data();
  }
  RopeParams p;
  p.head_dim = static_cast<int>(D);
  int64_t delta = 1;
  for (auto _ : st) {
    CHECK_OK(RerotateKeys(TensorView::Contiguous(data, dt, {heads, tokens, D}), delta, p));
    delta = delta == 1 ? -1 : 1;  // keep values bounded
    benchmark::ClobberMemory();
  }
  SetRates(st, 6.0 * n / 2, 2.0 * n * DTypeSize(dt));
  st.SetLabel(DTypeName(dt));
}
BENCHMARK(BM_RerotateKeys)->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// ApplyRope on [tokens=8192, heads=32, 128] activations (128 MiB) at
// positions 0..8191.
void BM_ApplyRope(benchmark::State& st) {
  const int64_t tokens = 8192, heads = 32, D = 128, n = tokens * heads * D;
  auto x = Random(n, 5);
  std::vector<int32_t> pos(tokens);
  std::iota(pos.begin(), pos.end(), 0);
  RopeParams p;
  p.head_dim = static_cast<int>(D);
  p.layout = static_cast<RopeLayout>(st.range(0));
  for (auto _ : st) {
    CHECK_OK(ApplyRope(TensorView::Contiguous(x.data(), DType::kF32, {tokens, heads, D}), pos.data(), p));
    benchmark::ClobberMemory();
  }
  SetRates(st, 3.0 * n, 2.0 * n * 4);
  st.SetLabel(p.layout == RopeLayout::kInterleaved ? "interleaved" : "half-split");
}
BENCHMARK(BM_ApplyRope)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// Convert 32M elements; arg: 0 f32->f16, 1 f16->f32, 2 f32->bf16, 3 bf16->f32.
void BM_Convert(benchmark::State& st) {
  const int64_t n = int64_t{32} << 20;
  const int which = static_cast<int>(st.range(0));
  std::vector<float> f = Random(n, 6);
  std::vector<uint16_t> h(n);
  const DType half = which >= 2 ? DType::kBF16 : DType::kF16;
  CHECK_OK(Convert(TensorView::Contiguous(f.data(), DType::kF32, {n}),
                   TensorView::Contiguous(h.data(), half, {n})));
  const bool to_half = which % 2 == 0;
  auto src = to_half ? TensorView::Contiguous(f.data(), DType::kF32, {n})
                     : TensorView::Contiguous(h.data(), half, {n});
  auto dst = to_half ? TensorView::Contiguous(h.data(), half, {n})
                     : TensorView::Contiguous(f.data(), DType::kF32, {n});
  for (auto _ : st) {
    CHECK_OK(Convert(src, dst));
    benchmark::ClobberMemory();
  }
  SetRates(st, 0, static_cast<double>(n) * 6);
  static const char* kLabels[] = {"f32->f16", "f16->f32", "f32->bf16", "bf16->f32"};
  st.SetLabel(kLabels[which]);
}
BENCHMARK(BM_Convert)->DenseRange(0, 3)->UseRealTime()->Unit(benchmark::kMillisecond);

// RmsNorm over [4096, 4096].
void BM_RmsNorm(benchmark::State& st) {
  const int64_t rows = 4096, dim = 4096;
  auto x = Random(rows * dim, 7), w = Random(dim, 8);
  std::vector<float> out(rows * dim);
  for (auto _ : st) {
    CHECK_OK(RmsNorm(TensorView::Contiguous(x.data(), DType::kF32, {rows, dim}),
                     TensorView::Contiguous(w.data(), DType::kF32, {dim}), 1e-5f,
                     TensorView::Contiguous(out.data(), DType::kF32, {rows, dim})));
    benchmark::ClobberMemory();
  }
  SetRates(st, 4.0 * rows * dim, 2.0 * rows * dim * 4);
}
BENCHMARK(BM_RmsNorm)->UseRealTime()->Unit(benchmark::kMillisecond);

// SwiGlu over [1024, 11008].
void BM_SwiGlu(benchmark::State& st) {
  const int64_t rows = 1024, ffn = 11008, n = rows * ffn;
  auto g = Random(n, 9), u = Random(n, 10);
  std::vector<float> out(n);
  for (auto _ : st) {
    CHECK_OK(SwiGlu(TensorView::Contiguous(g.data(), DType::kF32, {rows, ffn}),
                    TensorView::Contiguous(u.data(), DType::kF32, {rows, ffn}),
                    TensorView::Contiguous(out.data(), DType::kF32, {rows, ffn})));
    benchmark::ClobberMemory();
  }
  SetRates(st, 0, 3.0 * n * 4);
}
BENCHMARK(BM_SwiGlu)->UseRealTime()->Unit(benchmark::kMillisecond);

// Softmax over [512, 32000] logits.
void BM_Softmax(benchmark::State& st) {
  const int64_t rows = 512, n = 32000;
  auto x = Random(rows * n, 11);
  for (auto _ : st) {
    CHECK_OK(Softmax(TensorView::Contiguous(x.data(), DType::kF32, {rows, n})));
    benchmark::ClobberMemory();
  }
  SetRates(st, 0, 2.0 * rows * n * 4);
}
BENCHMARK(BM_Softmax)->UseRealTime()->Unit(benchmark::kMillisecond);

// KvDeviation of two [8, 32768, 128] tensors (2 x 128 MiB).
void BM_KvDeviation(benchmark::State& st) {
  const int64_t heads = 8, tokens = 32768, D = 128, n = heads * tokens * D;
  auto a = Random(n, 12), b = Random(n, 13);
  std::vector<float> out(tokens);
  for (auto _ : st) {
    CHECK_OK(KvDeviation(TensorView::Contiguous(a.data(), DType::kF32, {heads, tokens, D}),
                         TensorView::Contiguous(b.data(), DType::kF32, {heads, tokens, D}),
                         out.data()));
    benchmark::DoNotOptimize(out.data());
  }
  SetRates(st, 3.0 * n, 2.0 * n * 4);
}
BENCHMARK(BM_KvDeviation)->UseRealTime()->Unit(benchmark::kMillisecond);

// TopK of 512 out of 4096 deviation scores.
void BM_TopK(benchmark::State& st) {
  const int64_t n = 4096, k = 512;
  auto s = Random(n, 14);
  std::vector<int32_t> idx(k);
  for (auto _ : st) {
    CHECK_OK(TopK(s.data(), n, k, idx.data()));
    benchmark::DoNotOptimize(idx.data());
  }
  SetRates(st, 0, n * 4.0);
}
BENCHMARK(BM_TopK)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Int8 per-channel quantize / dequantize of [8, 32768, 128] (128 MiB f32).
void BM_Quant(benchmark::State& st) {
  const int64_t g = 8, rows = 32768, ch = 128, n = g * rows * ch;
  auto x = Random(n, 15);
  std::vector<int8_t> q(n);
  std::vector<float> scales(g * ch), out(n);
  const bool quant = st.range(0) == 0;
  CHECK_OK(QuantizeInt8PerChannel(TensorView::Contiguous(x.data(), DType::kF32, {g, rows, ch}),
                                  q.data(), scales.data()));
  for (auto _ : st) {
    if (quant) {
      CHECK_OK(QuantizeInt8PerChannel(TensorView::Contiguous(x.data(), DType::kF32, {g, rows, ch}),
                                      q.data(), scales.data()));
    } else {
      CHECK_OK(DequantizeInt8PerChannel(q.data(), scales.data(),
                                        TensorView::Contiguous(out.data(), DType::kF32, {g, rows, ch})));
    }
    benchmark::ClobberMemory();
  }
  // Quantize reads x twice (absmax pass, quantize pass) if it leaves cache.
  SetRates(st, 0, quant ? n * 4.0 * 2 + n : n * 4.0 + n);
  st.SetLabel(quant ? "quantize" : "dequantize");
}
BENCHMARK(BM_Quant)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// ------------------------------------------------------------- roofline table

// Collects runs while printing them normally.
class RooflineReporter : public benchmark::ConsoleReporter {
 public:
  struct Row {
    std::string name;
    double gflops = 0, gbs = 0, ai = 0;
    double busy = 1;  // real time / main-thread CPU time (>1 on a loaded box)
  };
  explicit RooflineReporter(bool color)
      : benchmark::ConsoleReporter(color ? OO_ColorTabular : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    benchmark::ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      Row row;
      row.name = r.benchmark_name();
      if (!r.report_label.empty()) row.name += " (" + r.report_label + ")";
      auto get = [&](const char* key) {
        auto it = r.counters.find(key);
        return it == r.counters.end() ? 0.0 : static_cast<double>(it->second.value);
      };
      row.gflops = get("GFLOP/s");
      row.gbs = get("GB/s");
      row.ai = get("AI");
      if (r.cpu_accumulated_time > 0) row.busy = r.real_accumulated_time / r.cpu_accumulated_time;
      rows_.push_back(row);
    }
  }
  // PrintTable: the roofline in markdown. "achieved" is wall-clock rate;
  // "per CPU-s" rescales it by real/CPU time of the main thread, i.e. the rate
  // while the kernel's threads actually ran (the honest figure on a machine
  // shared with other jobs; equal to "achieved" on an idle one).
  void PrintTable() const {
    const Row* gemm = nullptr;
    const Row* copy = nullptr;
    for (const Row& r : rows_) {
      if (r.name.rfind("BM_Ceiling_Sgemm", 0) == 0) gemm = &r;
      if (r.name.rfind("BM_Ceiling_Copy", 0) == 0) copy = &r;
    }
    const double peak = gemm ? gemm->gflops : 0, bw = copy ? copy->gbs : 0;
    const double peak_cpu = gemm ? gemm->gflops * gemm->busy : 0;
    const double bw_cpu = copy ? copy->gbs * copy->busy : 0;
    std::printf("\n### Roofline (threads=%d, isa=%s)\n\n", MaxThreads(), IsaName(ActiveIsa()));
    std::printf("Ceilings: sgemm %.1f GFLOP/s (%.1f per CPU-s), copy %.1f GB/s (%.1f per CPU-s); "
                "ridge point %.1f flop/B\n\n",
                peak, peak_cpu, bw, bw_cpu, bw > 0 ? peak / bw : 0.0);
    std::printf("| kernel | AI (flop/B) | achieved | ceiling | %% of ceiling | %% of ceiling per CPU-s |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows_) {
      if (r.name.rfind("BM_Ceiling", 0) == 0) continue;
      // Compute-bound kernels (attention) against sgemm, the rest against
      // the copy bandwidth.
      const bool compute = r.name.rfind("BM_Attention", 0) == 0;
      const double got = compute ? r.gflops : r.gbs;
      const double ceil = compute ? peak : bw;
      const double ceil_cpu = compute ? peak_cpu : bw_cpu;
      const char* unit = compute ? "GFLOP/s" : "GB/s";
      std::printf("| %s | %.2f | %.1f %s | %.1f %s | %.0f%% | %.0f%% |\n", r.name.c_str(), r.ai, got,
                  unit, ceil, unit, ceil > 0 ? 100.0 * got / ceil : 0.0,
                  ceil_cpu > 0 ? 100.0 * got * r.busy / ceil_cpu : 0.0);
    }
  }

 private:
  std::vector<Row> rows_;
};

}  // namespace
}  // namespace ragkv::kernels

int main(int argc, char** argv) {
  bool roofline = false;
  bool color = isatty(fileno(stdout)) != 0;
  int threads = 0;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--roofline") == 0) {
      roofline = true;
    } else if (std::strcmp(argv[i], "--benchmark_color=false") == 0) {
      color = false;
    } else if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else {
      args.push_back(argv[i]);
    }
  }
  if (threads > 0) ragkv::kernels::SetMaxThreads(threads);
  else ragkv::kernels::SetMaxThreads(ragkv::kernels::MaxThreads());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  ragkv::kernels::RooflineReporter reporter(color);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (roofline) reporter.PrintTable();
  benchmark::Shutdown();
  return 0;
}
