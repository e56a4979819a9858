// bench_quality.h: `ragkv bench quality` -- blend quality vs full prefill on a
// real checkpoint (stories260K), as a library function the CLI wraps.
//
// Prompts are RAG-like: a 1-token system prefix (BOS, cached), `chunks`
// passages sampled from the model itself (each from BOS, seeded, temperature
// 1, top-p 0.9, BOS/EOS excluded), precomputed alone at offset 0, then a
// query of `query_tokens` sampled from the model *after the whole context*
// (so it depends on every chunk), then a continuation of
// `continuation_tokens` sampled the same way. For every strategy:
//   kl   = mean over prompts and query positions of KL(full || strategy) of
//          the next-token distribution (nats),
//   top1 = fraction of query positions whose argmax agrees with full prefill,
//   dnll = mean teacher-forced NLL of the continuation minus full prefill's.
// Everything is seeded: the same options print the same table.
//
// task = "xchunk" runs the cross-chunk binding task instead (xchunk_task.h,
// docs/xchunk.md) on its instrument checkpoint: query "? k", continuation =
// the answer, and one line per strategy
//   accuracy strategy=NAME r=R acc=A kl=K top1=T
// with acc the fraction of prompts whose argmax after the query is the answer
// (full prefill first, as strategy=full-prefill).
//
// kv_codecs adds, per codec, one line per strategy
//   codec codec=C strategy=NAME r=R bytes_per_token=B acc=A dacc=D kl=K
//         top1=T kl_vs_raw=K2 top1_vs_raw=T2 kl_x_raw=X ci95=[LO,HI]
// (acc/dacc for xchunk only; the _vs_raw figures compare with the same
// strategy on the raw records), and one "codec codec=raw" line.
//
// task = "musique" takes its prompts from a MuSiQue-style file instead
// (`corpus`, `corpus_split`; bench_quality_corpus.h): each question's
// passages as the chunks, the question as the query, a continuation sampled
// from the model after it. With `neighbours` (either task that has a corpus:
// musique only) every chunk also gets a neighbour-aware record per k
// (PrecomputeChunkInContext after [BOS] + its k nearest passages, nearest
// last), and full reuse and gradual CacheBlend at every ratio are run on
// those records, one line each:
//   neighbours k=K strategy=NAME r=R kl=K top1=T kl_x_plain=X ci95=[LO,HI]
//              top1_vs_plain=T2
// plus one "neighbours k=K precompute_s=S x_plain=X context_tokens=C
// bytes_per_record=B plain_bytes_per_record=B0" line (precompute time of
// the chunks' records vs plain, mean context length, record sizes).
//
// Thread safety: RunQualityBench is reentrant (all state is local).
#ifndef RAGKV_BENCH_BLEND_BENCH_QUALITY_H_
#define RAGKV_BENCH_BLEND_BENCH_QUALITY_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/blend/quality_options.h"

namespace ragkv::blend {

struct StrategyQuality {
  std::string name;    // e.g. "full-reuse", "blend-gradual r=0.15"
  std::string family;  // "full-reuse", "prefix-reuse", "gradual", "single", "bottom-right"
  double ratio = 0;
  double kl = 0;
  double top1 = 0;
  double dnll = 0;
  double recomputed_fraction = 0;  // recomputed rows / prompt rows, averaged over layers
  double accuracy = -1;            // xchunk: answers right; -1 for the story task
  double mean_r = 0;               // mean applied ratio (the adaptive choice, else the ratio)
  // Codec rows (QualityBenchOptions::kv_codecs): the codec, stored bytes per
  // token, and agreement with the same strategy on raw records.
  std::string codec = "raw";
  double bytes_per_token = 0;
  double kl_vs_raw = 0, top1_vs_raw = 1, dacc_vs_raw = 0;
  // KL vs full prefill over the same strategy's on raw records, and its 95%
  // bootstrap interval over the prompts (bootstrap.h; 2,000 resamples).
  double kl_x_raw = 0, kl_x_raw_lo = 0, kl_x_raw_hi = 0;
};

// CheckQualityBenchOptions: the checks of `options` RunQualityBench and
// RunOracleBench (bench_oracle.h) make before loading anything.
absl::Status CheckQualityBenchOptions(const QualityBenchOptions& options);

// RunQualityBench: runs the bench (for xchunk the first row is full prefill,
// family "full-prefill"), prints one line per strategy
// "<name>: kl=... top1=... dnll=..." (plus a header line) to `out`, writes
// the CSV and PNG if asked. Errors: the model cannot be loaded, a prompt does
// not fit the context, gnuplot fails (the table is still printed).
absl::StatusOr<std::vector<StrategyQuality>> RunQualityBench(const QualityBenchOptions& options,
                                                             std::ostream& out);

// The files of --png and --csv (bench_quality_plot.cc). WritePlot: KL and
// top-1 (xchunk: accuracy) against r for every ratio sweep of `rows`, full
// reuse dashed, into o.png_path (gnuplot; its failure is an error).
// WriteCsv: one line per row.
absl::Status WritePlot(const QualityBenchOptions& o, const std::vector<StrategyQuality>& rows);
absl::Status WriteCsv(const std::string& path, const std::vector<StrategyQuality>& rows);

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_BENCH_QUALITY_H_
