// ttft_phases.cc: the phases of `ragkv bench ttft` after the matrix
// (internal/ttft_internal.h): blend under concurrency, speedup vs context
// length, and the multi-user run (Zipf popularity over a shared pool).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/kv_source.h"
#include "blend/store_source.h"
#include "kvstore/ram_tier.h"
#include "kvstore/ssd/ssd_tier.h"

namespace ragkv::services::ttft_internal {

using blend::Strategy;

namespace {

// ---- Load: concurrency levels ----

// LoadLevel: one concurrency level's shared state; Worker is one client
// thread (requests taken from `next` until o.load_requests).
struct LoadLevel {
  LoadLevel(const BenchContext& bench, TierStore* ram_store, int concurrency)
      : b(bench), ram(ram_store), conc(concurrency) {}

  const BenchContext& b;
  TierStore* ram;
  int conc;
  std::atomic<int> next{0};
  std::mutex mu;
  absl::Status first_error;
  std::vector<TtftSample> got;

  // Worker: runs requests until none is left; samples (or the first error)
  // under `mu`.
  void Worker();
};

void LoadLevel::Worker() {
  const TtftBenchOptions& o = b.o;
  const std::vector<Prompt>& prompts = b.prompts;
  for (;;) {
    const int i = next.fetch_add(1);
    if (i >= o.load_requests) return;
    const Prompt& p = prompts[i % prompts.size()];
    absl::StatusOr<Outcome> oc = RunRequest(
        b.blender, nullptr, b.model, p,
        Request{Strategy::kCacheBlend, false, o.load_ratio, ram, -1});
    std::lock_guard<std::mutex> lock(mu);
    if (!oc.ok()) {
      if (first_error.ok()) first_error = oc.status();
      continue;
    }
    TtftSample s;
    s.phase = "load";
    s.strategy = "blend";
    s.tier = "ram";
    s.ratio = o.load_ratio;
    s.concurrency = conc;
    s.prompt = static_cast<int>(i % prompts.size());
    oc->FillSample(&s);
    got.push_back(std::move(s));
  }
}

// RunLoadLevel: o.load_requests blend requests from `ram` by `conc` client
// threads; prints the level's line, keeps its samples. Errors: the first
// request error.
absl::StatusOr<LoadRow> RunLoadLevel(BenchContext& b, TierStore* ram, int conc) {
  LoadLevel level(b, ram, conc);
  const double t0 = Now();
  std::vector<std::thread> threads;
  for (int th = 0; th < conc; ++th) {
    threads.emplace_back([&level] { level.Worker(); });
  }
  for (auto& th : threads) th.join();
  RETURN_IF_ERROR(level.first_error);
  LoadRow lr;
  lr.concurrency = conc;
  lr.requests = static_cast<int>(level.got.size());
  lr.wall_s = Now() - t0;
  std::vector<double> t;
  for (const auto& s : level.got) t.push_back(s.ttft_s);
  lr.ttft = Summarize(t);
  b.out << absl::StrFormat("  load c=%d: %d requests in %.2f s = %.2f req/s, p50 %.0f ms\n",
                           conc, lr.requests, lr.wall_s, lr.requests / lr.wall_s,
                           lr.ttft.p50 * 1e3);
  for (auto& s : level.got) b.rep.samples.push_back(std::move(s));
  return lr;
}

}  // namespace

absl::StatusOr<std::vector<LoadRow>> RunLoad(BenchContext& b) {
  const TtftBenchOptions& o = b.o;
  std::vector<LoadRow> load_rows;
  TierStore* ram = b.tiers.Ram();
  if (ram != nullptr && o.load_requests > 0) {
    for (int conc : o.concurrency) {
      if (conc <= 0) continue;
      ASSIGN_OR_RETURN(LoadRow lr, RunLoadLevel(b, ram, conc));
      load_rows.push_back(lr);
    }
  }
  return load_rows;
}

// ---- Speedup vs context length ----

absl::StatusOr<std::vector<SweepRow>> RunSweep(BenchContext& b) {
  const TtftBenchOptions& o = b.o;
  const std::vector<Prompt>& prompts = b.prompts;
  std::vector<SweepRow> sweep;
  TierStore* ram = b.tiers.Ram();
  if (ram == nullptr) return sweep;
  for (int n : o.context_sweep) {
    if (n <= 0 || n > static_cast<int>(prompts[0].chunks.size())) continue;
    SweepRow sr;
    sr.chunks = n;
    std::vector<double> f, u, bl;
    for (int r = 0; r < o.repeats; ++r) {
      for (const auto& [strategy, rq] :
           std::vector<std::pair<std::string, Request>>{
               {"full-prefill", {Strategy::kFullPrefill, false, 0, nullptr, n}},
               {"full-reuse", {Strategy::kFullReuse, false, 0, ram, n}},
               {"blend", {Strategy::kCacheBlend, false, o.load_ratio, ram, n}}}) {
        ASSIGN_OR_RETURN(Outcome oc, RunRequest(b.blender, nullptr, b.model, prompts[0], rq));
        sr.context = oc.context;
        (strategy == "full-prefill" ? f : strategy == "full-reuse" ? u : bl).push_back(oc.ttft_s);
        TtftSample s;
        s.phase = "sweep";
        s.strategy = strategy;
        s.tier = rq.tier ? "ram" : "-";
        s.ratio = rq.ratio;
        oc.FillSample(&s);
        s.rep = r;
        b.rep.samples.push_back(std::move(s));
      }
    }
    sr.full_s = Percentile(f, 0.5);
    sr.reuse_s = Percentile(u, 0.5);
    sr.blend_s = Percentile(bl, 0.5);
    b.out << absl::StrFormat(
        "  sweep %d chunks (%d tokens): full %.0f ms, reuse %.0f ms, blend %.0f ms\n", n,
        sr.context, sr.full_s * 1e3, sr.reuse_s * 1e3, sr.blend_s * 1e3);
    sweep.push_back(sr);
  }
  return sweep;
}

// ---- Multi-user (Zipf popularity over a shared pool; RAM over SSD) ----

namespace {

// Zipf(s) sampler over [0, n).
class Zipf {
 public:
  Zipf(int n, double s) {
    double sum = 0;
    for (int i = 1; i <= n; ++i) cdf_.push_back(sum += 1.0 / std::pow(i, s));
    for (double& c : cdf_) c /= sum;
  }
  int operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<int>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

// MultiUserPool: the shared chunks, their keys, and the RAM-over-SSD store
// that serves them.
struct MultiUserPool {
  std::vector<std::vector<int32_t>> chunks;
  std::vector<kvstore::ChunkKey> keys;
  std::shared_ptr<kvstore::TieredStore> store;
};

// BuildPool: o.pool_chunks random chunks (from the run's token stream),
// precomputed onto an SSD tier under `work`; the store puts a RAM tier of
// o.ram_budget_chunks chunks over it (cold start: RAM empty). Errors:
// precompute, stores.
absl::StatusOr<MultiUserPool> BuildPool(BenchContext& b) {
  const TtftBenchOptions& o = b.o;
  MultiUserPool mp;
  std::vector<std::vector<int32_t>>& pool = mp.chunks;
  std::vector<kvstore::ChunkKey>& pool_keys = mp.keys;
  pool.resize(o.pool_chunks);
  uint64_t chunk_bytes = 0;
  for (auto& c : pool) {
    c.resize(o.chunk_tokens);
    for (auto& t : c) t = b.rng.Next();
  }
  kvstore::RamTierOptions ro;
  std::vector<blend::StoreChunk> encoded;
  for (const auto& c : pool) {
    ASSIGN_OR_RETURN(blend::ChunkKV kv, blend::PrecomputeChunk(b.model, c));
    ASSIGN_OR_RETURN(blend::StoreChunk sc, blend::EncodeForStore(kv, b.o.kv_codec));
    chunk_bytes = sc.chunk->TotalBytes();
    pool_keys.push_back(sc.key);
    encoded.push_back(std::move(sc));
  }
  ro.capacity_bytes = std::max<uint64_t>(1, chunk_bytes * o.ram_budget_chunks);
  ro.num_shards = 1;
  ASSIGN_OR_RETURN(std::shared_ptr<kvstore::Tier> ram_tier, kvstore::CreateRamTier(ro));
  kvstore::SsdTierOptions so;
  so.path = b.work + "/multi-ssd";
  so.sync_writes = false;
  ASSIGN_OR_RETURN(std::shared_ptr<kvstore::Tier> ssd_tier, kvstore::CreateSsdTier(so));
  // Cold start: every chunk on SSD only; the RAM tier warms by promotion.
  ASSIGN_OR_RETURN(auto ssd_only, kvstore::TieredStore::Create({}, {ssd_tier}));
  for (const auto& sc : encoded) RETURN_IF_ERROR(ssd_only->Put(sc.key, sc.chunk));
  RETURN_IF_ERROR(ssd_only->Flush());
  ssd_only.reset();
  encoded.clear();
  ASSIGN_OR_RETURN(mp.store, kvstore::TieredStore::Create({}, {ram_tier, ssd_tier}));
  return mp;
}

// MultiUserRun: the multi-user run's shared state; Worker is one client
// thread (requests taken from `next` until o.multi_user_requests).
struct MultiUserRun {
  MultiUserRun(BenchContext& bench, const MultiUserPool& shared_pool, int n, double s)
      : b(bench), pool(shared_pool), zipf(n, s) {}

  BenchContext& b;
  const MultiUserPool& pool;
  const Zipf zipf;
  std::atomic<int> next{0};
  std::mutex mu;
  absl::Status first_error;
  std::vector<double> ttft_first, ttft_second;
  uint64_t ram_hits = 0, ssd_hits = 0;

  // Worker: client thread `th` (its own Zipf stream); hits, TTFTs and
  // samples (or the first error) under `mu`.
  void Worker(int th);
};

void MultiUserRun::Worker(int th) {
  const TtftBenchOptions& o = b.o;
  const std::vector<Prompt>& prompts = b.prompts;
  std::mt19937_64 trng(o.seed * 7919 + th);
  for (;;) {
    const int i = next.fetch_add(1);
    if (i >= o.multi_user_requests) return;
    Prompt p;
    std::vector<int> picked;
    while (static_cast<int>(picked.size()) < std::min(o.chunks, o.pool_chunks)) {
      const int c = zipf(trng);
      if (std::find(picked.begin(), picked.end(), c) == picked.end()) picked.push_back(c);
    }
    for (int c : picked) {
      p.chunks.push_back(pool.chunks[c]);
      p.keys.push_back(pool.keys[c]);
    }
    p.query = prompts[i % prompts.size()].query;
    TierStore ts;
    ts.name = "ram+ssd";
    ts.store = pool.store;
    absl::StatusOr<Outcome> oc = RunRequest(
        b.blender, nullptr, b.model, p,
        Request{Strategy::kCacheBlend, false, o.load_ratio, &ts, -1});
    std::lock_guard<std::mutex> lock(mu);
    if (!oc.ok()) {
      if (first_error.ok()) first_error = oc.status();
      continue;
    }
    for (size_t ti : oc->tier_index) (ti == 0 ? ram_hits : ssd_hits)++;
    (i < o.multi_user_requests / 2 ? ttft_first : ttft_second).push_back(oc->ttft_s);
    TtftSample s;
    s.phase = "multi-user";
    s.strategy = "blend";
    s.tier = "ram+ssd";
    s.ratio = o.load_ratio;
    s.concurrency = o.multi_user_concurrency;
    s.prompt = i;
    oc->FillSample(&s);
    b.rep.samples.push_back(std::move(s));
  }
}

}  // namespace

absl::StatusOr<std::string> RunMultiUser(BenchContext& b) {
  const TtftBenchOptions& o = b.o;
  std::string multi_md;
  if (o.multi_user_requests <= 0) return multi_md;
  ASSIGN_OR_RETURN(const MultiUserPool pool, BuildPool(b));
  MultiUserRun run(b, pool, o.pool_chunks, o.zipf_s);
  const double t0 = Now();
  std::vector<std::thread> threads;
  for (int th = 0; th < std::max(1, o.multi_user_concurrency); ++th) {
    threads.emplace_back([&run, th] { run.Worker(th); });
  }
  for (auto& th : threads) th.join();
  RETURN_IF_ERROR(run.first_error);
  const double wall = Now() - t0;
  const uint64_t evictions = pool.store->TierStatsAll()[0].evictions;
  const uint64_t ram_hits = run.ram_hits, ssd_hits = run.ssd_hits;
  const LatencySummary a = Summarize(run.ttft_first), bs = Summarize(run.ttft_second);
  multi_md = absl::StrFormat(
      "\n### Multi-user (Zipf s=%.2f over %d chunks, RAM budget %d chunks over SSD, "
      "concurrency %d, blend r=%.2f)\n\n"
      "%d requests in %.2f s = %.2f req/s; chunk reads served from RAM %d, from SSD %d "
      "(RAM hit rate %.0f%%); RAM evictions %d.\n\n"
      "| half | n | p50 ms | p95 ms | p99 ms |\n|---|---:|---:|---:|---:|\n"
      "| first (cold) | %d | %s | %s | %s |\n| second (warm) | %d | %s | %s | %s |\n",
      o.zipf_s, o.pool_chunks, o.ram_budget_chunks, o.multi_user_concurrency, o.load_ratio,
      o.multi_user_requests, wall, o.multi_user_requests / wall, ram_hits, ssd_hits,
      100.0 * ram_hits / std::max<uint64_t>(1, ram_hits + ssd_hits), evictions, a.count,
      Ms(a.p50), Ms(a.p95), Ms(a.p99), bs.count, Ms(bs.p50), Ms(bs.p95), Ms(bs.p99));
  b.out << multi_md;
  return multi_md;
}

}  // namespace ragkv::services::ttft_internal
