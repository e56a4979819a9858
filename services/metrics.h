// metrics.h: Metrics, the sidecar's Prometheus registry, and MetricsServer,
// the loopback HTTP endpoint (cpp-httplib) that serves it at /metrics.
//
// Counters, gauges, summaries (count + sum) and histograms (cumulative
// `_bucket{le=...}` + `_sum` + `_count`, for percentiles in Prometheus /
// Grafana) keyed by name and a label string such as `stage="blend"`. A name
// observed is a histogram when DefineHistogram gave it bounds, else a
// summary. Collectors are callbacks run at scrape time that append already
// formatted lines (e.g. the store's per-tier hits/misses/bytes, read from
// kvstore::TierStats).
//
// Thread safety: all methods are thread-safe.
#ifndef RAGKV_SERVICES_METRICS_H_
#define RAGKV_SERVICES_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/metric_sink.h"

namespace ragkv::services {

class Metrics final : public pipeline::MetricSink {
 public:
  // Collector: appends Prometheus text lines (with their # TYPE lines).
  using Collector = std::function<void(std::string* out)>;

  // Add: counter `name{labels}` += value. `labels` is the inside of the
  // braces (e.g. `method="Search",code="OK"`), or empty.
  void Add(std::string_view name, std::string_view labels, double value = 1) override;
  // Observe: `name{labels}`: _count += 1, _sum += value, and for a histogram
  // the first bucket whose bound is >= value (le semantics) += 1.
  void Observe(std::string_view name, std::string_view labels, double value) override;
  // DefineHistogram: `name` becomes a histogram with these upper bounds
  // (ascending; +Inf implied). Observations made before stay a summary.
  void DefineHistogram(std::string_view name, std::vector<double> bounds);
  // LatencyMsBuckets: 0.25 ms .. 60 s, about 2.5x apart (RPCs, TTFT, stages).
  static std::vector<double> LatencyMsBuckets();
  // Set: gauge `name{labels}` = value.
  void Set(std::string_view name, std::string_view labels, double value);
  void AddCollector(Collector c);
  // Render: the Prometheus text exposition (format 0.0.4).
  std::string Render() const;

 private:
  struct Summary {
    double count = 0;
    double sum = 0;
    std::vector<double> buckets;  // histograms: per bound + the +Inf bucket, not cumulative
  };
  void RenderHistograms(std::string* out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable absl::Mutex mu_;
  // name -> labels -> value
  std::map<std::string, std::map<std::string, double>, std::less<>> counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, double>, std::less<>> gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, Summary>, std::less<>> summaries_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, Summary>, std::less<>> histograms_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<double>, std::less<>> bounds_ ABSL_GUARDED_BY(mu_);
  std::vector<Collector> collectors_ ABSL_GUARDED_BY(mu_);
};

// MetricsServer: GET /metrics -> metrics.Render() (text/plain; version=0.0.4);
// with auth_token set, a request without "Authorization: Bearer <token>"
// gets 401 (the comparison is constant-time).
class MetricsServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // loopback by default
    int port = 0;                    // 0 = pick a free port
    std::string auth_token;          // empty: open (loopback by default)
  };
  // Create: binds and starts serving on a background thread.
  // Unavailable when the port cannot be bound. `metrics` must outlive it.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Create(Options options,
                                                               const Metrics* metrics);
  ~MetricsServer();  // Stop()
  int port() const { return port_; }
  void Stop();

 private:
  MetricsServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_METRICS_H_
