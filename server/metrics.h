// metrics.h: HttpMetrics, the HTTP server's Prometheus metrics (served at
// GET /metrics on the HTTP port): requests by endpoint and status, time to
// first token and time per output token (histograms, seconds), prompt,
// cached and completion tokens, the exact-prefix reorder pass (runs by
// result, prefix tokens gained), and the scheduler's gauges (slots, active,
// queued). The sidecar's own histograms stay on its --metrics-port.
// Thread safety: all methods are thread-safe.
#ifndef RAGKV_SERVER_METRICS_H_
#define RAGKV_SERVER_METRICS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/api.h"

namespace ragkv::server {

class HttpMetrics {
 public:
  HttpMetrics();
  // Request: one response of `endpoint` ("chat", "completions", ...) with `status`.
  void Request(const std::string& endpoint, int status);
  // Finished: a request that generated (its timing and usage).
  void Finished(const Completion& c);
  // Reordered: one run of the exact-prefix reorder pass: `result` is
  // "gained" (the stored prefix grew), "unchanged" or "error" (a lookup
  // failed: the retriever's order kept); `gained` prefix tokens.
  void Reordered(const std::string& result, int64_t gained);
  struct Gauges {
    int slots = 0, active = 0, queued = 0;
  };
  // Render: the Prometheus text exposition.
  std::string Render(const Gauges& g) const;

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bound, then +Inf
    double sum = 0;
    uint64_t n = 0;
    void Observe(double v);
    void Render(const std::string& name, const std::string& help, std::string* out) const;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram ttft_, tpot_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  std::map<std::string, uint64_t> reorders_;  // by result
  uint64_t reorder_gained_ = 0;
};

}  // namespace ragkv::server

#endif  // RAGKV_SERVER_METRICS_H_
