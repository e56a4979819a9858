// bench_load.h: `ragkv bench load`, a closed-loop load generator against a
// running sidecar on loopback (docs/reliability.md §4).
//
// `concurrency` client threads (one connector::Client each) issue a mix of
// Search, GetChunk (the KV of a chunk found by a search) and Blend (chunks
// found by a search + the query text) back to back for `duration`, after a
// warm-up. Reported per operation: count, throughput, p50/p99/max latency,
// errors; and the server's RSS (from /proc/<server_pid>/status) after the
// warm-up and at the end. The run fails (exit 1) on any error or on RSS
// growth beyond `max_rss_growth_mb`.
// Thread safety: RunBenchLoad is self-contained; call it from one thread.
#ifndef RAGKV_BENCH_SERVICES_BENCH_LOAD_H_
#define RAGKV_BENCH_SERVICES_BENCH_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::services {

struct BenchLoadOptions {
  std::string server = "127.0.0.1:50051";
  std::string auth_token;
  int concurrency = 8;
  double duration_s = 10;
  double warmup_s = 2;
  // Operation mix (relative weights; 0 disables an operation).
  int search_weight = 4;
  int getchunk_weight = 4;
  int blend_weight = 1;
  uint32_t top_k = 4;
  std::vector<std::string> queries;  // empty: a built-in list
  int64_t server_pid = 0;            // > 0: report/limit that process's RSS
  double max_rss_growth_mb = 64;
};

struct OpReport {
  std::string op;
  uint64_t count = 0;
  uint64_t errors = 0;
  double qps = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  std::string first_error;
};

struct BenchLoadReport {
  std::vector<OpReport> ops;
  double seconds = 0;
  uint64_t total_errors = 0;
  int64_t server_rss_before_kb = -1;  // -1: not measured
  int64_t server_rss_after_kb = -1;
  int64_t client_rss_before_kb = -1;
  int64_t client_rss_after_kb = -1;
  bool rss_within_bound = true;
};

// RunBenchLoad: runs the load; errors only for bad options or when the
// server cannot be reached at all (per-request errors are counted).
absl::StatusOr<BenchLoadReport> RunBenchLoad(const BenchLoadOptions& options);

// FormatBenchLoadReport: a Markdown table plus the RSS lines.
std::string FormatBenchLoadReport(const BenchLoadOptions& options, const BenchLoadReport& r);

}  // namespace ragkv::services

#endif  // RAGKV_BENCH_SERVICES_BENCH_LOAD_H_
