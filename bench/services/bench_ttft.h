// bench_ttft.h: `ragkv bench ttft` -- time to first token of every strategy,
// side by side on the same prompts, from every KV tier, with the stage
// breakdown, under concurrency, and next to the roofline planner's
// prediction for this machine.
//
// Workloads (TtftBenchOptions):
//   - synthetic shapes (default): `prompts` prompts of `chunks` random chunks
//     of `chunk_tokens` tokens + a `query_tokens` query;
//   - corpus: MuSiQue-style JSON (retrieval/corpus_reader.h); each question's
//     first `chunks` passages (the retrieved top-k) tokenized and cut to
//     `chunk_tokens`, then the question as the query;
//   - multi-user (`multi_user_requests` > 0): a shared pool of
//     `pool_chunks` chunks precomputed into a RAM tier (budget of
//     `ram_budget_chunks` chunks) over an SSD tier, requests pick their
//     chunks with Zipf(`zipf_s`) popularity so the RAM tier warms (promotion
//     on hit) and evicts realistically; TTFT of the controller's blend.
// Strategies, interleaved per prompt (same prompt, every strategy, then the
// next prompt): full prefill, prefix caching, full reuse (r=0), CacheBlend at
// each ratio, and the loading controller's choice. Tiers: RAM, SSD (RocksDB;
// page cache dropped before every read: by default posix_fadvise(DONTNEED)
// on the DB files; `ssd_cold` selects drop_caches (falls back to fadvise
// when not permitted) or O_DIRECT reads; the method used is reported), Redis
// (a private redis-server, testing::RedisServerProcess, on an ephemeral
// loopback port unless `redis` is given; skipped with a note when absent).
// Each tier is its own single-tier TieredStore so every read comes from that
// tier.
// Paths (`path`): "inproc" -- Blender over StoreKvSource streams in this
// process; "grpc" -- the real path (bench_ttft_grpc.h): client ->
// EngineService.Generate of an in-process Sidecar on 127.0.0.1:0 ->
// reference engine -> BlendService over gRPC, fused f16 KV streamed into the
// engine's cache, forward of the last query token, first token; "both" (default) runs the two
// interleaved on the same prompts (the gRPC rows right after their
// in-process twin) and reports the transport overhead per strategy (gRPC
// p50 - in-process p50). With the gRPC path on, each chunk is ingested into
// the sidecar as one document (synthetic mode: random words, one byte = one
// token for the byte tokenizer) and the prompt uses the catalogue's tokens
// for both paths; the KV precomputed here is stored in the sidecar with
// PutChunk (RAM tier). The gRPC rows cover full prefill, prefix caching,
// full reuse and each CacheBlend ratio (the engine has no controller mode).
//
// Prediction: every in-process row next to blend::CostModel::Predict* for
// this machine -- raw (roofline at the sgemm peak) and calibrated (kernel
// rates of one layer of this model measured by MeasureCpu between requests,
// median; tier probes) -- with a by-stage table of predicted vs measured.
//
// Outputs under `out_dir` (when non-empty): samples.csv and samples.json
// (raw samples), summary.md (the Markdown tables), and PNG plots drawn with
// gnuplot: ttft_vs_ratio.png (with the gRPC series), speedup_vs_context.png,
// ttft_cdf_load.png.
//
// Thread safety: RunTtftBench is reentrant (all state is local); it starts
// and stops its own helper processes.
#ifndef RAGKV_BENCH_SERVICES_BENCH_TTFT_H_
#define RAGKV_BENCH_SERVICES_BENCH_TTFT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/blender.h"
#include "blend/cost_model.h"
#include "blend/calibration.h"
#include "kvstore/kv_chunk.h"

namespace ragkv::services {

// ---- Statistics ----------------------------------------------------------

// Percentile: the q-quantile (q in [0, 1]) of `samples` by linear
// interpolation between closest ranks (NumPy's default, "type 7"):
// h = (n-1)q, x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h]) over the
// sorted samples. 0 for an empty input. `samples` need not be sorted.
double Percentile(std::vector<double> samples, double q);

struct LatencySummary {
  size_t count = 0;
  double mean = 0, min = 0, max = 0, p50 = 0, p95 = 0, p99 = 0;
};
LatencySummary Summarize(const std::vector<double>& samples);

// ---- The bench -----------------------------------------------------------

struct TtftBenchOptions {
  std::string model_spec =
      "synthetic:layers=8,dim=512,heads=8,kv_heads=8,ffn=1408,vocab=32000,ctx=4096";
  int max_seq_len = 0;      // context override (0: from the model)
  std::string tokenizer;    // corpus mode: tokenizer path (default: the model's / bytes)
  std::string corpus;       // MuSiQue-style JSON; empty: synthetic shapes
  int prompts = 2;          // distinct prompts (questions in corpus mode)
  std::string split = "all";  // corpus mode: dev|test|all questions (retrieval/qa_split.h)
  int chunks = 6;
  int chunk_tokens = 512;
  int query_tokens = 32;    // synthetic mode; corpus mode uses the question
  std::vector<double> ratios = {0.05, 0.10, 0.15, 0.20, 0.30};
  bool with_prefix = true;       // prefix-caching strategy
  bool with_controller = true;   // loading controller's choice
  double r_min = 0.15;           // controller quality floor
  std::vector<std::string> tiers = {"ram", "ssd", "redis"};
  int repeats = 1;               // passes over the prompts
  kernels::DType kv_dtype = kernels::DType::kF16;
  // Codec of the records stored in the in-process tiers (the gRPC sidecars
  // store what PutChunk sends: raw).
  kvstore::Codec kv_codec = kvstore::Codec::kRaw;
  // SSD cold reads: "auto" (= fadvise), "drop" (drop_caches), "fadvise",
  // "direct" (O_DIRECT reads), "none" (warm page cache).
  std::string ssd_cold = "auto";
  std::string redis;             // host:port; empty: start a private redis-server
  std::string work_dir;          // scratch (RocksDB); empty: a fresh /tmp dir
  // Load: for each level, `load_requests` blend requests at the load ratio
  // from the RAM tier by that many client threads.
  std::vector<int> concurrency = {1, 4, 16};
  int load_requests = 16;
  double load_ratio = 0.15;
  // Speedup vs context length: chunk counts (full prefill vs full reuse and
  // CacheBlend at load_ratio, RAM tier). Empty: skipped.
  std::vector<int> context_sweep = {1, 2, 4, 6};
  // Multi-user mode (0: off).
  int multi_user_requests = 0;
  int pool_chunks = 48;
  int ram_budget_chunks = 12;
  double zipf_s = 1.0;
  int multi_user_concurrency = 4;
  // Quality deltas (stories260K-class checkpoints): prompts for
  // blend::RunQualityBench (0: off).
  int quality_prompts = 0;
  // CPU ceilings and kernel rates for the planner's prediction (scratch_dir,
  // model, attention_keys and alloc_bytes are set from the workload).
  blend::CpuMeasureOptions calibration;
  // Re-measure the kernel rates every this many matrix requests (0: only
  // once, before the matrix); the prediction uses the median.
  int calibrate_every = 8;
  // path: "inproc", "grpc" (in-process full prefill as the baseline +
  // the gRPC rows) or "both".
  std::string path = "both";
  std::string out_dir;           // outputs (empty: no files)
  bool plots = true;             // PNGs (needs gnuplot; a note if absent)
  uint64_t seed = 1;
};

// TtftSample: one measured request.
struct TtftSample {
  std::string phase;      // "matrix", "load", "sweep", "multi-user"
  std::string strategy;   // "full-prefill", "prefix", "full-reuse", "blend", "controller", "gate"
  std::string tier;       // "-", "ram", "ssd", "redis"
  std::string path = "inproc";  // "inproc" or "grpc"
  double ratio = 0;       // recompute ratio (controller: its choice)
  int concurrency = 1;
  int prompt = 0;
  int rep = 0;
  int64_t context_tokens = 0;
  int64_t recomputed_rows = 0;  // summed over layers
  uint64_t kv_bytes = 0;        // KV record bytes read from the tier
  double ttft_s = 0;            // request wall time (open sources + blend)
  double open_s = 0;            // opening the tier streams (headers)
  blend::StageTimings stages;   // in-process path only
  // gRPC path only: the engine's breakdown (engine.proto TtftBreakdown).
  double rpc_engine_ttft_s = 0;  // TTFT inside the engine (no client hop)
  double rpc_fetch_s = 0;        // sidecar store reads (or GetChunks)
  double rpc_blend_s = 0;        // Blend RPC - fetch: blend + stream + import
  double rpc_prefill_s = 0;      // engine prefill (query; all rows for full prefill)
  uint64_t wire_bytes = 0;       // fused f16 KV streamed sidecar -> engine
};

// TtftRow: one configuration of the matrix, aggregated.
struct TtftRow {
  std::string strategy;
  std::string tier;
  std::string path = "inproc";
  double ratio = 0;
  LatencySummary ttft;
  double vs_full = 0;           // p50 / full prefill p50
  double predicted_raw_s = 0;   // cost model, raw CPU roofline
  double predicted_cal_s = 0;   // cost model with this CPU's measured kernel rates
  blend::RequestPrediction predicted;  // the calibrated prediction by stage
  double transport_s = 0;       // gRPC rows: p50 - the in-process twin's p50
  double wire_mb = 0;           // gRPC rows: fused KV MB streamed per request
  double kv_mb = 0;             // mean KV MB moved per request
  blend::StageTimings stages;   // of the median sample
  TtftSample median;            // the median sample itself
  double quality_kl = -1, quality_top1 = -1;  // -1: not measured
};

struct TtftReport {
  std::vector<TtftSample> samples;
  std::vector<TtftRow> rows;
  std::string markdown;          // the summary table(s)
  std::vector<std::string> files;  // written outputs
  std::vector<std::string> notes;  // cold-read method, skipped tiers, ...
  blend::HardwareSpec cpu;         // the calibrated CPU spec used for predictions
  // efficiency: roofline time of a one-chunk prefill at the sgemm peak /
  // its measured time (reported; not used by the predictions).
  double efficiency = 0;
};

// RunTtftBench: runs everything, prints progress and the table to `out`.
// Errors: bad options (InvalidArgument), model/corpus load failures, store
// failures. A missing redis-server or gnuplot is a note, not an error.
absl::StatusOr<TtftReport> RunTtftBench(const TtftBenchOptions& options, std::ostream& out);

}  // namespace ragkv::services

#endif  // RAGKV_BENCH_SERVICES_BENCH_TTFT_H_
