// bench_blend.h: `ragkv bench blend` -- blend time vs full prefill, same run,
// on a synthetic model at a realistic size, with the per-stage breakdown.
//
// Default workload (issue 6): synthetic 8-layer / 512-dim model, 6 chunks x
// 512 tokens + a 32-token query, KV f16 from the RAM tier (TieredStore with
// one RAM tier, streamed layer by layer through StoreKvSource), r = 15%.
// Every configuration runs `repeats` times; the median is reported.
// Thread safety: reentrant.
#ifndef RAGKV_BENCH_BLEND_BENCH_BLEND_H_
#define RAGKV_BENCH_BLEND_BENCH_BLEND_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/blender.h"
#include "kernels/tensor.h"

namespace ragkv::blend {

struct BlendBenchOptions {
  std::string model_spec =
      "synthetic:layers=8,dim=512,heads=8,kv_heads=8,ffn=1408,vocab=32000,ctx=4096";
  int chunks = 6;
  int chunk_tokens = 512;
  int query_tokens = 32;
  std::vector<double> ratios = {0.15};
  int repeats = 3;
  kernels::DType kv_dtype = kernels::DType::kF16;
  bool from_store = true;       // false: in-memory sources (no store, no codec)
  bool overlap_loading = true;  // load layer l+1 on a second thread
  uint64_t seed = 1;
};

struct BlendBenchRow {
  std::string name;       // "full-prefill", "blend-gradual r=0.15", ...
  double seconds = 0;     // median wall time of the Blend call
  double vs_full = 0;     // seconds / full prefill seconds
  StageTimings stages;    // of the median run
  double bound = 0;       // arithmetic (FLOP) bound of seconds / full prefill
};

// RunBlendBench: prints a header, one line per configuration and the
// per-stage breakdown to `out`; returns the rows.
absl::StatusOr<std::vector<BlendBenchRow>> RunBlendBench(const BlendBenchOptions& options,
                                                         std::ostream& out);

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_BENCH_BLEND_H_
