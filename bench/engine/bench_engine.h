// bench_engine.h: `ragkv bench engine --engine llama.cpp`: time to first
// token and quality of every strategy inside llama.cpp, on the same
// prompts, the same GGUF and the same threads, interleaved per prompt:
//   full-prefill  llama.cpp prefills the whole prompt (the baseline);
//   prefix-cache  llama.cpp keeps the previous request's common prefix in
//                 its cache (llama-server's cache_prompt) and prefills the rest;
//   full-reuse    ragkv's fused context KV (r = 0) handed over
//                 (engine/llamacpp/), llama.cpp prefills the query;
//   cacheblend    the same at each ratio.
// TTFT: wall time from the request to the query's logits in llama.cpp
// (Blend stream + KV handover + query prefill for the ragkv rows; with
// sidecar_query "all", the served path's: the sidecar blends all but the
// last prompt token, llama.cpp decodes that one). The
// sidecar is the `ragkv serve` stack in this process on 127.0.0.1:0; every
// chunk is ingested into its catalogue and its KV, precomputed by ragkv,
// stored with PutChunk in the chosen tier before the timed rounds.
// Quality: at every query position, KL(full || strategy) of llama.cpp's
// next-token distribution and top-1 agreement with llama.cpp's own full
// prefill of the same prompt.
// Workloads: the xchunk task (`task` "xchunk", a checkpoint trained on it,
// tools/xchunk/: BOS, `chunks` passages of `pairs` key/value pairs, the
// query "? k"; the passages are sent as documents, their KV stored by
// content beforehand; dev/test by seed parity), a MuSiQue-style corpus (the first `prompts` questions of the
// chosen dev/test split in file order -- retrieval/qa_split.h; all of the
// split's when it has fewer, none repeated -- each question's first `chunks`
// passages, their first chunk of `chunk_tokens` or, with passages "cut",
// their tokens cut to `chunk_tokens`; the question as the query), or synthetic shapes (random-word documents, random query ids).
// Thread safety: RunEngineBench is reentrant; one at a time per process
// (it sets the kernel thread count).
#ifndef RAGKV_BENCH_ENGINE_BENCH_ENGINE_H_
#define RAGKV_BENCH_ENGINE_BENCH_ENGINE_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/services/bench_ttft.h"

namespace ragkv::bench {

struct EngineBenchOptions {
  std::string engine = "llama.cpp";  // the only engine so far
  std::string model;  // a GGUF; empty: `synthetic` written as a GGUF of `encoding`
  // task: "text" (a corpus or synthetic shapes, below) or "xchunk" (the
  // passages of blend::MakeXchunkPrompt(seed, i, pairs, chunks); needs a
  // checkpoint of the xchunk vocabulary as `model`).
  std::string task = "text";
  int pairs = 32;
  std::string synthetic = "layers=16,dim=1024,heads=16,kv_heads=8,ffn=2816,vocab=32000";
  std::string encoding = "f16";
  std::string corpus;  // MuSiQue-style JSON; empty: synthetic shapes
  // The corpus questions used: "dev" (the default: tuning happens on dev),
  // "test" (report what dev chose) or "all". Ignored for synthetic shapes.
  std::string split = "dev";
  int prompts = 4;  // the first `prompts` questions of the split
  int chunks = 6;
  int chunk_tokens = 256;
  int query_tokens = 32;
  // passages (corpus workloads): how each question's passages become chunks.
  //   "chunker": the passage text ingested into the sidecar, its first chunk
  //     of <= chunk_tokens (word / sentence boundaries; the catalogue path);
  //   "cut": the passage's tokens cut to chunk_tokens, sent as documents
  //     (their KV stored by content beforehand): the prompts of `ragkv bench
  //     quality --task musique` with --chunk-tokens-min = max = chunk_tokens.
  std::string passages = "chunker";
  std::vector<double> ratios = {0.15};
  // selectors: CacheBlend's row ranking by name (BlendOptions.selector), each
  // at every ratio, reported as "cacheblend/<name>"; empty: the sidecar's own
  // (one "cacheblend" strategy per ratio).
  std::vector<std::string> selectors;
  // chunk_head_tokens: every CacheBlend strategy also recomputes each
  // chunk's first N rows (BlendOptions.chunk_head_tokens), named "+headN".
  int chunk_head_tokens = 0;
  // lookahead_layers: one "cacheblend+aheadH" strategy per horizon H in
  // [0, 1024] and ratio (BlendOptions.lookahead_layers, lookahead-deviation).
  std::vector<int> lookahead_layers;
  // adaptive_masses: one "cacheblend-adaptive/m=M" strategy per mass
  // (BlendOptions.adaptive_mass), its ratio capped at adaptive_max; the rows
  // report the mean ratio the sidecar chose (mean_r).
  std::vector<double> adaptive_masses;
  // adaptive_thresholds: one "cacheblend-adaptive/t=T" strategy per
  // threshold (BlendOptions.adaptive_threshold), capped the same way.
  std::vector<double> adaptive_thresholds;
  // adaptive_budgets: one "cacheblend-adaptive/b=B" strategy per budget
  // (BlendOptions.adaptive_budget: the sidecar's threshold is set over this
  // strategy's earlier prompts so that their mean ratio is B), capped the
  // same way.
  std::vector<double> adaptive_budgets;
  double adaptive_max = 0.30;
  // sidecar_query: what of the query the sidecar blends.
  //   "first": its first token; llama.cpp prefills the whole query itself,
  //     so TTFT includes that prefill (the quality harness's own shape).
  //   "all": every prompt token but the last, as the OpenAI server sends a
  //     request (local_tail 1). TTFT is then timed on that served path, and
  //     quality on the same blend request with llama.cpp recomputing the
  //     query rows itself (the context rows are the served ones).
  std::string sidecar_query = "first";
  int threads = 2;   // llama.cpp threads and ragkv kernel threads
  int repeats = 1;   // rounds over the prompts
  std::vector<std::string> tiers = {"ram"};  // the sidecar's KV tiers
  // first_position_records: the sidecar serves each prompt's first chunk
  // from its first-position record (pipeline.h Options::
  // first_position_records); before the recorded rounds a warm pass sends
  // every prompt once (full reuse) and waits for store-back to write them,
  // the state of a server where each document has led a prompt before.
  bool first_position_records = false;
  std::string out_dir;      // samples.csv, summary.json, ttft.png; empty: none
  std::string scratch_dir;  // empty: a fresh /tmp dir, removed afterwards
  uint64_t seed = 1;
};

// EngineSample: one strategy on one prompt.
struct EngineSample {
  int prompt = 0, round = 0;
  std::string strategy;
  double ratio = 0;
  double ttft_ms = 0, blend_ms = 0, handover_ms = 0, decode_ms = 0;
  int context_tokens = 0, handed_over = 0, reused = 0, recomputed = 0, prefilled = 0;
  int query_tokens = 0;     // the query positions kl and top1 average over
  double kl = 0, top1 = 0;  // vs llama.cpp's full prefill, over the query positions
  int correct = -1;          // xchunk: llama.cpp's last-row top-1 is the answer (0/1)
  double applied_ratio = 0;  // the CacheBlend ratio the sidecar applied
  std::string fallback;
};

struct EngineRow {
  std::string strategy;
  double ratio = 0;
  services::LatencySummary ttft;  // ms
  double vs_full = 0;             // ttft p50 / full-prefill p50
  double kl = 0, top1 = 0;        // means over prompts
  double acc = -1;                // xchunk: the share of prompts answered right
  double mean_r = 0;              // mean applied ratio (adaptive: the sidecar's choices)
  // Blending rows: sum of KL / full reuse's over the same prompts, and its
  // 95% paired bootstrap interval (others: 0).
  double kl_vs_reuse = 0, kl_vs_reuse_lo = 0, kl_vs_reuse_hi = 0;
  double blend_p50 = 0, handover_p50 = 0, decode_p50 = 0;
  int fallbacks = 0;
};

// CachePages: what one fused cache of the longest prompt (f32, every layer)
// costs in fresh memory (allocate + zero: the page faults) and in memory
// kept from before (zero only: what the sidecar's --fused-cache-pool pays).
struct CachePages {
  double mb = 0, fresh_ms = 0, kept_ms = 0;
};

struct EngineBenchReport {
  std::string workload;
  // Corpus workloads: the split, the questions used, the split's and the
  // file's question counts, and the --prompts asked for (more than
  // `questions` when the split ran out). Empty split: synthetic shapes.
  std::string split;
  int questions = 0, split_questions = 0, file_questions = 0, prompts_requested = 0;
  std::string command;
  CachePages cache_pages;
  std::vector<EngineSample> samples;
  std::vector<EngineRow> rows;
};

// RunEngineBench: the run above; progress lines to `progress`. Errors:
// model / corpus / sidecar / llama.cpp failures.
absl::StatusOr<EngineBenchReport> RunEngineBench(const EngineBenchOptions& o,
                                                 std::ostream& progress);
// PrintEngineBench: for a corpus, a "# split=S questions=N (...)" line
// (saying so when --prompts exceeded the split); then one line per strategy
//   engine=llama.cpp strategy=NAME r=R ttft_p50_ms=X ttft_p95_ms=Y vs_full=Z kl=K top1=T
// (a corpus run appends " split=S questions=N"), then a Markdown table with
// the stage breakdown.
void PrintEngineBench(const EngineBenchReport& r, std::ostream& out);
// WriteEngineBenchFiles: samples.csv, summary.json and ttft.png (gnuplot;
// a missing gnuplot is a note on stderr, not an error) under `dir`, created
// when missing.
absl::Status WriteEngineBenchFiles(const EngineBenchReport& r, const std::string& dir);

}  // namespace ragkv::bench

#endif  // RAGKV_BENCH_ENGINE_BENCH_ENGINE_H_
