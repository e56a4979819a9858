// metric_sink.h: MetricSink, where the pipeline reports what it counts and
// times (Prometheus names: docs/services.md "Metrics"). services::Metrics
// implements it for the sidecar; a null sink pointer counts nothing.
// Thread safety: implementations must be thread-safe.
#ifndef RAGKV_PIPELINE_METRIC_SINK_H_
#define RAGKV_PIPELINE_METRIC_SINK_H_

#include <string_view>

namespace ragkv::pipeline {

class MetricSink {
 public:
  virtual ~MetricSink() = default;
  // Add: counter `name{labels}` += value (`labels`: the inside of the braces).
  virtual void Add(std::string_view name, std::string_view labels, double value = 1) = 0;
  // Observe: one observation of `name{labels}` (a histogram or a summary).
  virtual void Observe(std::string_view name, std::string_view labels, double value) = 0;
};

}  // namespace ragkv::pipeline

#endif  // RAGKV_PIPELINE_METRIC_SINK_H_
