#include "server/metrics.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ragkv::server {

HttpMetrics::HttpMetrics() {
  const std::vector<double> b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                 0.25,  0.5,    1,     2.5,  5,     10,   30};
  for (Histogram* h : {&ttft_, &tpot_}) {
    h->bounds = b;
    h->counts.assign(b.size() + 1, 0);
  }
}

void HttpMetrics::Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++n;
}

void HttpMetrics::Histogram::Render(const std::string& name, const std::string& help,
                                    std::string* out) const {
  absl::StrAppendFormat(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cum += counts[i];
    absl::StrAppendFormat(out, "%s_bucket{le=\"%g\"} %d\n", name, bounds[i], cum);
  }
  cum += counts.back();
  absl::StrAppendFormat(out, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %.6f\n%s_count %d\n", name, cum,
                        name, sum, name, n);
}

void HttpMetrics::Request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> l(mu_);
  ++requests_[{endpoint, status}];
}

void HttpMetrics::Finished(const Completion& c) {
  std::lock_guard<std::mutex> l(mu_);
  prompt_tokens_ += c.usage.prompt_tokens;
  cached_tokens_ += c.usage.cached_tokens;
  completion_tokens_ += c.usage.completion_tokens;
  if (c.usage.completion_tokens > 0) ttft_.Observe(c.timing.ttft_ms / 1000);
  if (c.usage.completion_tokens > 1) {
    tpot_.Observe((c.timing.e2e_ms - c.timing.ttft_ms) / 1000 / (c.usage.completion_tokens - 1));
  }
}

void HttpMetrics::Reordered(const std::string& result, int64_t gained) {
  std::lock_guard<std::mutex> l(mu_);
  ++reorders_[result];
  reorder_gained_ += static_cast<uint64_t>(std::max<int64_t>(gained, 0));
}

std::string HttpMetrics::Render(const Gauges& g) const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out =
      "# HELP ragkv_http_requests_total HTTP API responses by endpoint and status.\n"
      "# TYPE ragkv_http_requests_total counter\n";
  for (const auto& [k, n] : requests_) {
    absl::StrAppendFormat(&out, "ragkv_http_requests_total{endpoint=\"%s\",code=\"%d\"} %d\n",
                          k.first, k.second, n);
  }
  ttft_.Render("ragkv_http_ttft_seconds", "Time from a request's arrival to its first token.",
               &out);
  tpot_.Render("ragkv_http_tpot_seconds", "Time per output token after the first.", &out);
  absl::StrAppendFormat(
      &out,
      "# TYPE ragkv_http_prompt_tokens_total counter\nragkv_http_prompt_tokens_total %d\n"
      "# TYPE ragkv_http_cached_tokens_total counter\nragkv_http_cached_tokens_total %d\n"
      "# TYPE ragkv_http_completion_tokens_total counter\nragkv_http_completion_tokens_total %d\n"
      "# TYPE ragkv_http_slots gauge\nragkv_http_slots %d\n"
      "# TYPE ragkv_http_slots_active gauge\nragkv_http_slots_active %d\n"
      "# TYPE ragkv_http_queue_depth gauge\nragkv_http_queue_depth %d\n",
      prompt_tokens_, cached_tokens_, completion_tokens_, g.slots, g.active, g.queued);
  out +=
      "# HELP ragkv_reorder_requests_total Runs of the exact-prefix reorder pass by result "
      "(gained: the stored exact prefix grew).\n"
      "# TYPE ragkv_reorder_requests_total counter\n";
  for (const char* r : {"gained", "unchanged", "error"}) {
    const auto it = reorders_.find(r);
    absl::StrAppendFormat(&out, "ragkv_reorder_requests_total{result=\"%s\"} %d\n", r,
                          it == reorders_.end() ? 0 : it->second);
  }
  absl::StrAppendFormat(&out,
                        "# HELP ragkv_reorder_prefix_tokens_gained_total Stored exact-prefix "
                        "tokens the reorder pass added over the retriever's order.\n"
                        "# TYPE ragkv_reorder_prefix_tokens_gained_total counter\n"
                        "ragkv_reorder_prefix_tokens_gained_total %d\n",
                        reorder_gained_);
  return out;
}

}  // namespace ragkv::server
