#include "bench/services/bench_load.h"


#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "connector/client.h"
#include "connector/kv_sink.h"

namespace ragkv::services {
namespace {

enum Op { kSearch = 0, kGetChunk = 1, kBlend = 2, kNumOps = 3 };
const char* const kOpNames[kNumOps] = {"Search", "GetChunk", "Blend"};

const std::vector<std::string>& DefaultQueries() {
  static const std::vector<std::string> q = {
      "Where was the author educated?", "Who founded the company?",
      "When did the band release its first album?", "What river flows through the city?",
      "Which team won the championship?", "Who wrote the novel?"};
  return q;
}

// VmRssKb: resident set of `pid` in KiB, -1 if unreadable.
int64_t VmRssKb(int64_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// CountingSink: discards fused KV, checks it arrives complete.
class CountingSink : public KVSink {
 public:
  absl::Status OnHeader(const FusedPromptInfo& info) override {
    layers_expected_ = info.num_layers;
    return absl::OkStatus();
  }
  absl::Status OnLayer(const FusedLayerView& layer) override {
    ++layers_;
    return absl::OkStatus();
  }
  absl::Status OnRestart(const FailedLoadInfo&) override {
    layers_ = 0;
    return absl::OkStatus();
  }
  bool Complete() const { return layers_expected_ > 0 && layers_ == layers_expected_; }

 private:
  int layers_expected_ = 0;
  int layers_ = 0;
};

struct WorkerResult {
  std::vector<double> lat_ms[kNumOps];
  uint64_t errors[kNumOps] = {0, 0, 0};
  std::string first_error[kNumOps];
};

double Percentile(std::vector<double>* v, double p) {
  if (v->empty()) return 0;
  const size_t i = std::min(v->size() - 1, static_cast<size_t>(p * static_cast<double>(v->size())));
  std::nth_element(v->begin(), v->begin() + static_cast<std::ptrdiff_t>(i), v->end());
  return (*v)[i];
}

}  // namespace

absl::StatusOr<BenchLoadReport> RunBenchLoad(const BenchLoadOptions& o) {
  if (o.concurrency < 1 || o.concurrency > 1024) {
    return absl::InvalidArgumentError("bench load: --concurrency must be 1..1024");
  }
  if (o.duration_s <= 0 || o.warmup_s < 0) {
    return absl::InvalidArgumentError("bench load: --duration must be > 0, --warmup >= 0");
  }
  const int total_weight = o.search_weight + o.getchunk_weight + o.blend_weight;
  if (o.search_weight < 0 || o.getchunk_weight < 0 || o.blend_weight < 0 || total_weight == 0) {
    return absl::InvalidArgumentError("bench load: operation weights must be >= 0, not all 0");
  }
  const std::vector<std::string>& queries = o.queries.empty() ? DefaultQueries() : o.queries;

  ClientOptions co;
  co.target = o.server;
  co.auth_token = o.auth_token;
  co.default_deadline = absl::Seconds(30);
  co.max_attempts = 1;  // a retried request would hide an error
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < o.concurrency; ++i) {
    auto c = Client::Create(co);
    if (!c.ok()) return c.status();
    clients.push_back(std::move(*c));
  }
  if (absl::Status h = clients[0]->HealthCheck(); !h.ok()) {
    return absl::UnavailableError(absl::StrFormat("bench load: %s not healthy: %s", o.server,
                                                  h.ToString()));
  }

  std::atomic<bool> measuring{false}, stop{false};
  std::vector<WorkerResult> results(static_cast<size_t>(o.concurrency));
  auto worker = [&](int w) {
    Client& client = *clients[static_cast<size_t>(w)];
    WorkerResult& r = results[static_cast<size_t>(w)];
    std::mt19937 rng(static_cast<uint32_t>(w * 7919 + 1));
    while (!stop.load(std::memory_order_relaxed)) {
      const std::string& q = queries[rng() % queries.size()];
      int pick = static_cast<int>(rng() % static_cast<uint32_t>(total_weight));
      const Op op = pick < o.search_weight                      ? kSearch
                    : pick < o.search_weight + o.getchunk_weight ? kGetChunk
                                                                 : kBlend;
      // GetChunk and Blend need chunks: their search is not timed.
      v1::SearchRequest sr;
      sr.set_text(q);
      sr.set_k(o.top_k);
      absl::Status st;
      const bool count = measuring.load(std::memory_order_relaxed);
      Clock::time_point t0 = Clock::now();
      auto hits = client.Search(sr);
      if (op == kSearch) {
        st = hits.status();
        if (st.ok() && hits->hits().empty()) st = absl::NotFoundError("search: no hits");
      } else if (!hits.ok() || hits->hits().empty()) {
        st = hits.ok() ? absl::NotFoundError("search: no hits") : hits.status();
      } else if (op == kGetChunk) {
        const auto& hit = hits->hits(static_cast<int>(rng() % static_cast<uint32_t>(hits->hits_size())));
        t0 = Clock::now();
        auto chunk = client.GetChunk(hit.chunk().kv_key());
        st = chunk.status();
        if (st.ok() && chunk->layers.empty()) st = absl::DataLossError("GetChunk: no layers");
      } else {
        v1::BlendRequest br;
        for (const auto& h : hits->hits()) br.add_segments()->set_chunk_id(h.chunk().chunk_id());
        br.add_segments()->set_text(q);
        br.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
        CountingSink sink;
        t0 = Clock::now();
        st = client.Blend(br, &sink);
        if (st.ok() && !sink.Complete()) st = absl::DataLossError("Blend: incomplete stream");
      }
      const double ms = MsSince(t0);
      if (!count) continue;
      if (st.ok()) {
        r.lat_ms[op].push_back(ms);
      } else {
        if (r.errors[op]++ == 0) r.first_error[op] = st.ToString();
      }
    }
  };

  BenchLoadReport rep;
  std::vector<std::thread> threads;
  for (int w = 0; w < o.concurrency; ++w) threads.emplace_back(worker, w);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup_s));
  if (o.server_pid > 0) rep.server_rss_before_kb = VmRssKb(o.server_pid);
  rep.client_rss_before_kb = VmRssKb(::getpid());
  const Clock::time_point start = Clock::now();
  measuring = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(o.duration_s));
  measuring = false;
  rep.seconds = SecondsSince(start);
  stop = true;
  for (auto& t : threads) t.join();
  if (o.server_pid > 0) rep.server_rss_after_kb = VmRssKb(o.server_pid);
  rep.client_rss_after_kb = VmRssKb(::getpid());

  for (int op = 0; op < kNumOps; ++op) {
    OpReport r;
    r.op = kOpNames[op];
    std::vector<double> all;
    for (WorkerResult& w : results) {
      all.insert(all.end(), w.lat_ms[op].begin(), w.lat_ms[op].end());
      r.errors += w.errors[op];
      if (r.first_error.empty()) r.first_error = w.first_error[op];
    }
    r.count = all.size();
    r.qps = static_cast<double>(r.count) / rep.seconds;
    r.p50_ms = Percentile(&all, 0.50);
    r.p99_ms = Percentile(&all, 0.99);
    r.max_ms = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
    rep.total_errors += r.errors;
    rep.ops.push_back(std::move(r));
  }
  if (rep.server_rss_before_kb > 0 && rep.server_rss_after_kb > 0) {
    rep.rss_within_bound = static_cast<double>(rep.server_rss_after_kb - rep.server_rss_before_kb) <=
                           o.max_rss_growth_mb * 1024;
  }
  return rep;
}

std::string FormatBenchLoadReport(const BenchLoadOptions& o, const BenchLoadReport& r) {
  std::string s = absl::StrFormat(
      "ragkv bench load: %s, concurrency %d, %.1f s (after %.1f s warm-up), mix search:getchunk:blend "
      "%d:%d:%d, k=%u\n\n| op | requests | req/s | p50 ms | p99 ms | max ms | errors |\n"
      "|---|---:|---:|---:|---:|---:|---:|\n",
      o.server, o.concurrency, r.seconds, o.warmup_s, o.search_weight, o.getchunk_weight,
      o.blend_weight, o.top_k);
  for (const OpReport& op : r.ops) {
    s += absl::StrFormat("| %s | %d | %.1f | %.2f | %.2f | %.2f | %d |\n", op.op, op.count, op.qps,
                         op.p50_ms, op.p99_ms, op.max_ms, op.errors);
  }
  s += absl::StrFormat("\nerrors: %d\n", r.total_errors);
  for (const OpReport& op : r.ops) {
    if (!op.first_error.empty()) s += absl::StrFormat("first %s error: %s\n", op.op, op.first_error);
  }
  if (r.server_rss_before_kb >= 0) {
    s += absl::StrFormat("server RSS: %.1f MiB -> %.1f MiB (%+.1f MiB, bound %.0f MiB): %s\n",
                         r.server_rss_before_kb / 1024.0, r.server_rss_after_kb / 1024.0,
                         (r.server_rss_after_kb - r.server_rss_before_kb) / 1024.0,
                         o.max_rss_growth_mb, r.rss_within_bound ? "ok" : "EXCEEDED");
  }
  s += absl::StrFormat("client RSS: %.1f MiB -> %.1f MiB\n", r.client_rss_before_kb / 1024.0,
                       r.client_rss_after_kb / 1024.0);
  return s;
}

}  // namespace ragkv::services
