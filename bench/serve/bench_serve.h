// bench_serve.h: `ragkv bench serve`, the load benchmark of the OpenAI
// server (issue 39, docs/benchmarks.md "Serving under load"). It starts
// each server as a child process on a free 127.0.0.1 port -- `ragkv serve
// --engine llama.cpp` with blending ("ragkv"), the same with every request
// in mode local ("ragkv-local": llama.cpp prefills everything), and the
// pinned llama-server ("llama-server", `--cache-reuse 64`, its RAM prompt
// cache on, `-np` = the slots) -- on the same GGUF, threads and context,
// puts the run's passages into ragkv's store (`ragkv precompute`, and each
// once as a `documents` entry; not measured), sends every server
// the same warm-up requests (and "ragkv-reorder": ragkv whose requests ask
// for the exact-prefix reorder pass, its store warmed as "ragkv"'s; "ragkv-first": ragkv with
// --first-position-records, warmed likewise), then drives each in turn with closed-loop
// streaming chat requests (cells interleaved: for each cell, every server),
// and stops them. Workload: bench/serve/workload.h.
//
// Thread safety: RunServeBench runs one benchmark; it owns its client
// threads and child processes.
#ifndef RAGKV_BENCH_SERVE_BENCH_SERVE_H_
#define RAGKV_BENCH_SERVE_BENCH_SERVE_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/serve/workload.h"

namespace ragkv::bench_serve {

struct ServeBenchOptions {
  std::string model;  // GGUF; "" : `synthetic` written as `encoding` into the work dir
  std::string synthetic = "layers=16,dim=1024,heads=16,kv_heads=8,ffn=2816,vocab=32000";
  std::string encoding = "f16";  // f16, q4_k_m, ... (bench/model/synthetic_gguf.h)
  WorkloadOptions workload;      // corpus, passage_tokens, k, zipf_s, documents_share, seed
  std::vector<std::string> servers = {"ragkv", "ragkv-local", "llama-server"};
  std::vector<int> clients = {1, 4};  // closed-loop concurrency per cell
  int requests = 30;                  // measured requests per recombining cell
  int warmup = 4;                     // warm-up requests every server gets first
  int repeats = 8;                    // "same prompt" / "new question" pairs (0: off)
  int slots = 4;                      // --parallel / -np
  int ctx_per_slot = 2048;            // --ctx-size / -c = slots x this
  int threads = 2;                    // llama.cpp threads (and OMP/BLAS threads of each server)
  int max_tokens = 32;
  bool precompute = true;    // the run's passages warm in "ragkv"'s store (see above)
  std::string ragkv_bin;     // "" : `ragkv` beside this binary
  std::string llama_server;  // "" : the setup-llamacpp --server build in the cache
  std::string work_dir;      // "" : a fresh directory under $TMPDIR (removed after)
  std::string out_dir;       // "" : no files; else serve.csv, serve.json, serve_ttft.png
  double request_timeout_s = 600;
  // ragkv_mode: `ragkv.mode` of the "ragkv" and "ragkv-reorder" requests
  // ("": the server's default, cacheblend). The exact-prefix reorder pass
  // (server "ragkv-reorder": ragkv.reorder true) finds documents in stored
  // prefix chains only where earlier requests computed them exactly, e.g.
  // in mode prefix (docs/services.md "Exact-prefix reorder").
  std::string ragkv_mode;
};

// CellResult: one server x workload x concurrency.
struct CellResult {
  std::string server, workload;  // workload: recombine | same-prompt | new-question
  int clients = 1, requests = 0, errors = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0, e2e_p50_ms = 0, rps = 0;
  double out_tok_s = 0;    // median over requests of decode tokens/s after the first token
  double cached_frac = 0;  // sum cached_tokens / sum prompt_tokens
  double mean_prompt_tokens = 0;
  // ragkv's own breakdown, medians over requests (-1: the server sends none):
  // the sidecar's blend, llama.cpp's prefill after the handover, and the
  // rows the blend recomputed / llama.cpp prefilled.
  double blend_p50_ms = -1, prefill_p50_ms = -1;
  double recomputed_p50 = -1, prefilled_p50 = -1;
  std::string first_error;
  std::vector<std::string> first_content;  // per request, "" on an error
  // The exact-prefix reorder pass (requests whose response says it ran):
  // runs, those whose stored prefix grew, the mean tokens it grew by (over
  // runs), and the mean rows the sidecar served from stored prefix blocks
  // (every ragkv request; -1: none reported).
  int reorder_runs = 0, reorder_hits = 0;
  double reorder_gain_mean = 0, stored_prefix_mean = -1;
};

struct ServeBenchReport {
  std::string description;  // the workload, servers and settings in words
  std::vector<CellResult> cells;
  // Quality: first generated token of "ragkv" equal to "ragkv-local"'s
  // (full prefill), over every measured request both served (-1: n/a).
  double first_token_agreement = -1;
  int agreement_n = 0;
  // The same for every other ragkv server ("ragkv-reorder", "ragkv-first"): server ->
  // (agreement, n).
  std::vector<std::pair<std::string, std::pair<double, int>>> agreements;
  std::vector<std::string> notes;  // skipped servers, precompute, RSS
  std::vector<std::string> files;
  int total_errors = 0;
};

// RunServeBench: errors: the model, corpus or a server that does not start
// (a missing llama-server binary is a note, not an error). `progress`
// receives one line per step and per request.
absl::StatusOr<ServeBenchReport> RunServeBench(const ServeBenchOptions& o, std::ostream& progress);

// FormatServeReport: the `serve ...` lines: one per server x workload x
// concurrency, then the quality line and the notes.
std::string FormatServeReport(const ServeBenchReport& r);

// WriteServeFiles: serve.csv, serve.json and serve_ttft.png (gnuplot; when
// gnuplot is missing or fails, a note instead of the PNG) into out_dir;
// fills r->files / r->notes. Errors: unwritable directory.
absl::Status WriteServeFiles(const std::string& out_dir, ServeBenchReport* r);

}  // namespace ragkv::bench_serve

#endif  // RAGKV_BENCH_SERVE_BENCH_SERVE_H_
