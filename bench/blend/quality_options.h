// quality_options.h: QualityBenchOptions, what `ragkv bench quality`
// measures (bench_quality.h says what each field's lines are), shared by
// the bench (bench_quality.h), its prompts (quality_prompts.h) and the
// oracle lines (bench_oracle.h).
#ifndef RAGKV_BENCH_BLEND_QUALITY_OPTIONS_H_
#define RAGKV_BENCH_BLEND_QUALITY_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "blend/blender.h"
#include "kernels/tensor.h"

namespace ragkv::blend {

struct QualityBenchOptions {
  std::string task = "story";  // "story" (self-sampled), "xchunk" or "musique"
  std::string model_path;   // required: .bin / .gguf / HF dir / synthetic:...
  int pairs = 32;           // xchunk: key/value pairs per prompt (split into `chunks`)
  int max_seq_len = 512;    // context override (stories260K was trained at 512)
  int prompts = 50;
  uint64_t seed = 1;
  int chunks = 6;
  int chunk_tokens_min = 64;  // each chunk's length is uniform in [min, max]
  int chunk_tokens_max = 64;
  int query_tokens = 16;
  int continuation_tokens = 32;
  float temperature = 1.0f;
  float top_p = 0.9f;
  std::vector<double> ratios = {0.05, 0.10, 0.15, 0.20, 0.30, 0.50};
  // Precompute each chunk after the system prefix (PrecomputeChunkAfter)
  // instead of alone at position 0.
  bool condition_on_prefix = false;
  // The first chunk's record computed right after the prompt's prefix
  // (PrecomputeChunkInContext; what `ragkv serve --first-position-records`
  // serves once stored), the others alone (`--first-position`).
  bool first_position = false;
  // KV dtype of the cached chunks (f32 isolates the algorithm's error).
  kernels::DType kv_dtype = kernels::DType::kF32;
  // Template for every CacheBlend strategy (deviation, gradual schedule...);
  // strategy, ratio, filtering, causal and logits are set per strategy.
  BlendOptions blend;
  // Extra recompute selectors compared at every ratio (gradual filtering),
  // by blend::SelectorName ("chunk-head", "query-attention", ...).
  std::vector<std::string> selectors;
  // Adaptive ratio lines (BlendOptions::adaptive_mass): one per mass, capped
  // at adaptive_max, each followed by fixed r at the mean r it chose.
  bool adaptive = false;
  std::vector<double> adaptive_masses = {0.3, 0.5, 0.7};
  double adaptive_max = 0.30;
  // Adaptive lines by threshold (BlendOptions::adaptive_threshold), one per
  // value, each followed by fixed r at its mean r (with --adaptive).
  std::vector<double> adaptive_thresholds;
  // Store codecs measured against the raw records ("int8", "fp8"; "raw" is
  // the baseline and always there): full reuse and gradual CacheBlend at
  // every ratio on chunks passed through the codec (blend::ThroughCodec),
  // one "codec ..." line each with bytes per token and the deltas vs raw.
  // Compare against f16 with kv_dtype = f16.
  std::vector<std::string> kv_codecs;
  // musique: the corpus file and the question split (dev | test | all).
  std::string corpus;
  std::string corpus_split = "dev";
  // musique: "cut" (each passage's tokens cut to chunk_tokens_max) or
  // "chunker" (the sidecar chunker's first chunk of its text; the prompts
  // of `bench engine --passages chunker`).
  std::string passages = "cut";
  // Neighbour-aware records compared with plain ones (musique only): one set
  // of lines per k (>= 1). Empty: none.
  std::vector<int> neighbours;
  // Oracle rankers, for RunOracleBench (bench_oracle.h; RunQualityBench
  // refuses a non-empty list). oracle_budgets: the mean r of its
  // per-prompt best-choice lines.
  std::vector<std::string> oracle;
  std::vector<double> oracle_budgets = {0.10};
  std::string csv_path;  // empty: no CSV
  std::string png_path;  // empty: no plot (needs gnuplot on PATH)
};

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_QUALITY_OPTIONS_H_
