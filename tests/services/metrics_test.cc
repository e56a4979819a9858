// Metrics: a defined histogram renders cumulative `_bucket{le=...}` lines
// (le semantics: a value equal to a bound lands in that bucket), `_sum` and
// `_count`, per label set; other observed names stay summaries.
#include "services/metrics.h"

#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/source_dir.h"

namespace ragkv::services {
namespace {

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInfEqualToCount) {
  Metrics m;
  m.DefineHistogram("lat_ms", {10, 1, 100});  // unsorted on purpose
  for (double v : {0.5, 1.0, 3.0, 10.0, 50.0, 500.0}) m.Observe("lat_ms", "op=\"a\"", v);
  m.Observe("lat_ms", "", 2.0);
  m.Observe("plain_ms", "", 7.0);
  const std::string out = m.Render();
  for (const char* want : {"# TYPE lat_ms histogram\n",
                           "lat_ms_bucket{op=\"a\",le=\"1\"} 2\n",
                           "lat_ms_bucket{op=\"a\",le=\"10\"} 4\n",
                           "lat_ms_bucket{op=\"a\",le=\"100\"} 5\n",
                           "lat_ms_bucket{op=\"a\",le=\"+Inf\"} 6\n",
                           "lat_ms_sum{op=\"a\"} 564.5\n",
                           "lat_ms_count{op=\"a\"} 6\n",
                           "lat_ms_bucket{le=\"1\"} 0\n",
                           "lat_ms_bucket{le=\"10\"} 1\n",
                           "lat_ms_count 1\n",
                           "# TYPE plain_ms summary\n",
                           "plain_ms_count 1\n",
                           "plain_ms_sum 7\n"}) {
    EXPECT_TRUE(absl::StrContains(out, want)) << want << "\n" << out;
  }
  EXPECT_FALSE(absl::StrContains(out, "plain_ms_bucket"));
  const auto b = Metrics::LatencyMsBuckets();
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
}

// The Grafana dashboard (docs/grafana/ragkv.json) parses and plots only
// series the sidecar exports.
TEST(MetricsTest, TheGrafanaDashboardPlotsExportedSeries) {
  std::ifstream in(std::string(RAGKV_SOURCE_DIR) + "/docs/grafana/ragkv.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json d = nlohmann::json::parse(in);
  const std::set<std::string> exported = {
      "ragkv_rpc_ms_bucket", "ragkv_rpc_ms_count", "ragkv_engine_ttft_ms_bucket",
      "ragkv_stage_ms_bucket", "ragkv_tier_read_ms_bucket", "ragkv_blend_ratio_bucket",
      "ragkv_store_hits_total", "ragkv_store_lookups_total", "ragkv_blend_failed_loads_total"};
  const std::regex name("ragkv_[a-z_]+");
  int exprs = 0;
  ASSERT_GE(d.at("panels").size(), 6u);
  for (const auto& p : d.at("panels")) {
    for (const auto& t : p.at("targets")) {
      const std::string e = t.at("expr").get<std::string>();
      ++exprs;
      for (std::sregex_iterator it(e.begin(), e.end(), name), end; it != end; ++it) {
        EXPECT_TRUE(exported.count(it->str())) << it->str() << " in " << e;
      }
    }
  }
  EXPECT_GE(exprs, 10);
}

}  // namespace
}  // namespace ragkv::services
