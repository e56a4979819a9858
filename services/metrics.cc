#include "services/metrics.h"

#include <httplib.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_format.h"
#include "base/constant_time.h"

namespace ragkv::services {

void Metrics::Add(std::string_view name, std::string_view labels, double value) {
  absl::MutexLock lock(&mu_);
  auto it = counters_.find(name);
  if (it == counters_.end()) it = counters_.emplace(std::string(name), std::map<std::string, double>()).first;
  it->second[std::string(labels)] += value;
}

void Metrics::DefineHistogram(std::string_view name, std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  absl::MutexLock lock(&mu_);
  bounds_[std::string(name)] = std::move(bounds);
}

std::vector<double> Metrics::LatencyMsBuckets() {
  return {0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000};
}

void Metrics::Observe(std::string_view name, std::string_view labels, double value) {
  absl::MutexLock lock(&mu_);
  if (auto b = bounds_.find(name); b != bounds_.end()) {
    auto h = histograms_.find(name);
    if (h == histograms_.end()) {
      h = histograms_.emplace(std::string(name), std::map<std::string, Summary>()).first;
    }
    Summary& s = h->second[std::string(labels)];
    const std::vector<double>& bounds = b->second;
    s.buckets.resize(bounds.size() + 1);
    const size_t i = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
    s.buckets[i] += 1;
    s.count += 1;
    s.sum += value;
    return;
  }
  auto it = summaries_.find(name);
  if (it == summaries_.end()) it = summaries_.emplace(std::string(name), std::map<std::string, Summary>()).first;
  Summary& s = it->second[std::string(labels)];
  s.count += 1;
  s.sum += value;
}

void Metrics::Set(std::string_view name, std::string_view labels, double value) {
  absl::MutexLock lock(&mu_);
  auto it = gauges_.find(name);
  if (it == gauges_.end()) it = gauges_.emplace(std::string(name), std::map<std::string, double>()).first;
  it->second[std::string(labels)] = value;
}

void Metrics::AddCollector(Collector c) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(c));
}

namespace {
std::string Series(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : absl::StrFormat("%s{%s}", name, labels);
}
std::string Le(const std::string& labels, const std::string& le) {
  return labels.empty() ? absl::StrFormat("le=\"%s\"", le)
                        : absl::StrFormat("%s,le=\"%s\"", labels, le);
}
}  // namespace

void Metrics::RenderHistograms(std::string* out) const {
  for (const auto& [name, series] : histograms_) {
    const std::vector<double>& bounds = bounds_.find(name)->second;
    absl::StrAppendFormat(out, "# TYPE %s histogram\n", name);
    for (const auto& [labels, s] : series) {
      double cum = 0;
      for (size_t i = 0; i < s.buckets.size(); ++i) {
        cum += s.buckets[i];
        const std::string le = i < bounds.size() ? absl::StrFormat("%g", bounds[i]) : "+Inf";
        absl::StrAppendFormat(out, "%s %.17g\n", Series(name + "_bucket", Le(labels, le)), cum);
      }
      absl::StrAppendFormat(out, "%s %.17g\n", Series(name + "_sum", labels), s.sum);
      absl::StrAppendFormat(out, "%s %.17g\n", Series(name + "_count", labels), s.count);
    }
  }
}

std::string Metrics::Render() const {
  std::string out;
  std::vector<Collector> collectors;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, series] : counters_) {
      absl::StrAppendFormat(&out, "# TYPE %s counter\n", name);
      for (const auto& [labels, v] : series) {
        absl::StrAppendFormat(&out, "%s %.17g\n", Series(name, labels), v);
      }
    }
    for (const auto& [name, series] : gauges_) {
      absl::StrAppendFormat(&out, "# TYPE %s gauge\n", name);
      for (const auto& [labels, v] : series) {
        absl::StrAppendFormat(&out, "%s %.17g\n", Series(name, labels), v);
      }
    }
    for (const auto& [name, series] : summaries_) {
      absl::StrAppendFormat(&out, "# TYPE %s summary\n", name);
      for (const auto& [labels, s] : series) {
        absl::StrAppendFormat(&out, "%s %.17g\n", Series(name + "_count", labels), s.count);
        absl::StrAppendFormat(&out, "%s %.17g\n", Series(name + "_sum", labels), s.sum);
      }
    }
    RenderHistograms(&out);
    collectors = collectors_;
  }
  for (const auto& c : collectors) c(&out);
  return out;
}

constexpr size_t kMetricsThreads = 32;

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Create(Options options,
                                                                     const Metrics* metrics) {
  std::unique_ptr<MetricsServer> ms(new MetricsServer());
  ms->impl_ = std::make_unique<Impl>();
  const std::string want = options.auth_token.empty() ? "" : "Bearer " + options.auth_token;
  ms->impl_->server.Get("/metrics", [metrics, want](const httplib::Request& req,
                                                    httplib::Response& res) {
    if (!want.empty() && !ConstantTimeEquals(req.get_header_value("Authorization"), want)) {
      res.status = 401;
      res.set_content("missing or wrong bearer token\n", "text/plain");
      return;
    }
    res.set_content(metrics->Render(), "text/plain; version=0.0.4");
  });
  ms->impl_->server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  // Slow or idle connections must not starve scrapes: each holds a worker
  // for at most ~1 s without sending (a scraper sends its request at once),
  // keep-alive is short, and the pool is wider than httplib's default 8.
  ms->impl_->server.set_read_timeout(1, 0);
  ms->impl_->server.set_write_timeout(5, 0);
  ms->impl_->server.set_keep_alive_timeout(1);
  ms->impl_->server.set_keep_alive_max_count(16);
  ms->impl_->server.new_task_queue = [] { return new httplib::ThreadPool(kMetricsThreads); };
  int port = 0;
  if (options.port == 0) {
    port = ms->impl_->server.bind_to_any_port(options.host);
  } else if (ms->impl_->server.bind_to_port(options.host, options.port)) {
    port = options.port;
  } else {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrFormat("metrics: cannot bind %s:%d", options.host, options.port));
  }
  ms->port_ = port;
  Impl* impl = ms->impl_.get();
  impl->thread = std::thread([impl] { impl->server.listen_after_bind(); });
  return ms;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (!impl_) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace ragkv::services
