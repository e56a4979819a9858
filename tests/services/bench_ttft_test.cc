// Tests of the TTFT bench harness (services/bench_ttft.h) and the planner
// command (blend/calibration.h, cli/plan.h): percentile statistics on known samples, the
// planner's per-layer arithmetic against hand-computed cases, and a smoke run
// of the whole bench on a tiny synthetic model that must write its CSV, JSON,
// Markdown and (when gnuplot is installed) non-empty PNG plots, with the
// gRPC path (client -> in-process sidecar's engine -> Blend over loopback)
// interleaved with the in-process rows.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "bench/services/bench_ttft.h"
#include "bench/services/internal/ttft_internal.h"
#include "blend/blender.h"
#include "kvstore/ram_tier.h"
#include "kvstore/tiered_store.h"
#include "model/synthetic.h"
#include "retrieval/corpus_reader.h"
#include "retrieval/qa_split.h"
#include "tests/support/require.h"
#include "tests/support/source_dir.h"
#include "blend/calibration.h"
#include "cli/plan.h"

namespace ragkv::services {
namespace {

using blend::CpuCeilings;
using blend::CpuHardwareSpec;
using blend::CpuMeasureOptions;
using blend::DescribeKernelRates;
using blend::MeasureCpu;
using blend::MedianCeilings;
using blend::ResolveModelShape;
using cli::PlanCommandOptions;
using cli::RunPlanCommand;

TEST(Percentile, KnownSamples) {
  std::vector<double> s;
  for (int i = 1; i <= 100; ++i) s.push_back(i);
  // h = 99 q: p50 -> 49.5 -> 50.5; p95 -> 94.05 -> 95.05; p99 -> 98.01 -> 99.01.
  EXPECT_DOUBLE_EQ(Percentile(s, 0.50), 50.5);
  EXPECT_NEAR(Percentile(s, 0.95), 95.05, 1e-9);
  EXPECT_NEAR(Percentile(s, 0.99), 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(Percentile(s, 0.0), 1);
  EXPECT_DOUBLE_EQ(Percentile(s, 1.0), 100);
  EXPECT_DOUBLE_EQ(Percentile({3, 1, 2}, 0.5), 2);     // unsorted input
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4}, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(Percentile({5}, 0.99), 5);
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0);
}

TEST(Percentile, MatchesNaiveNearestRankBounds) {
  // Interpolated percentiles always lie between the neighbouring order
  // statistics of a naive sort.
  std::vector<double> s = {9, 2, 7, 7, 1, 12, 3, 5, 8, 4, 6, 11, 10};
  std::vector<double> sorted = s;
  std::sort(sorted.begin(), sorted.end());
  for (double q : {0.1, 0.33, 0.5, 0.9, 0.95}) {
    const double h = (sorted.size() - 1) * q;
    const double p = Percentile(s, q);
    EXPECT_GE(p, sorted[static_cast<size_t>(h)]);
    EXPECT_LE(p, sorted[std::min(sorted.size() - 1, static_cast<size_t>(h) + 1)]);
  }
}

TEST(Summarize, MeanMinMax) {
  LatencySummary s = Summarize({4, 1, 3, 2});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
  EXPECT_EQ(Summarize({}).count, 0u);
}

// Hand-computed: dim 8, 2 heads x 4, 1 KV head, ffn 16, f32 weights.
//   W = dim*H*d + 2*dim*kv*d + H*d*dim + 3*dim*ffn = 64 + 64 + 64 + 384 = 576
//   prefill of T=10 (P=0): FLOPs = 2*10*576 + 4*H*d*(10*11/2) = 11520 + 1760
//   bytes = W*4 + KV(10) + 10*(4*dim + 2*ffn)*4 = 2304 + 160 + 2560
//   KV(10) = 2 * kv * d * 10 * 2 bytes (f16) = 160
TEST(PlanArithmetic, HandComputedLayer) {
  absl::StatusOr<blend::ModelShape> shape = ResolveModelShape(
      "synthetic:layers=2,dim=8,heads=2,kv_heads=1,ffn=16,vocab=32,ctx=64", /*f32=*/false, 2);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->layers, 2);
  EXPECT_EQ(shape->head_dim, 4);
  EXPECT_EQ(shape->weight_bytes_per_elem, 4);
  EXPECT_EQ(shape->kv_bytes_per_elem, 2);
  blend::HardwareSpec hw;
  hw.peak_flops = 1e6;  // 1 MFLOP/s
  hw.mem_bw = 1e5;      // 100 kB/s
  hw.ram_tier_bw = 1e4;
  const blend::CostModel cm(*shape, hw);
  const blend::StageCost c = cm.PrefillLayer(10, 0);
  EXPECT_DOUBLE_EQ(c.flops, 13280);
  EXPECT_DOUBLE_EQ(c.bytes, 5024);
  EXPECT_DOUBLE_EQ(cm.KvBytesPerLayer(10), 160);
  // Roofline: max(13280 / 1e6, 5024 / 1e5) = 0.05024 s, bandwidth-bound x3.78.
  EXPECT_DOUBLE_EQ(cm.ComputeSeconds(c), 0.05024);
  double ratio = 0;
  EXPECT_FALSE(cm.ComputeBound(c, &ratio));
  EXPECT_NEAR(ratio, 5024.0 / 1e5 / (13280.0 / 1e6), 1e-12);
  EXPECT_DOUBLE_EQ(cm.LoadSeconds(10, blend::Tier::kRam), 160.0 / 1e4);
}

TEST(PlanArithmetic, Llama3_8bPresetPerLayer) {
  // Llama-3-8B: dim 4096, 32 heads x 128, 8 KV heads, ffn 14336.
  // W = 4096*4096 + 2*4096*1024 + 4096*4096 + 3*4096*14336 = 218103808.
  // KV per token per layer, fp16: 2 * 8 * 128 * 2 = 4096 bytes.
  absl::StatusOr<blend::ModelShape> shape = ResolveModelShape("llama-3-8b", false);
  ASSERT_TRUE(shape.ok()) << shape.status();
  const blend::CostModel cm(*shape, blend::HardwareSpec{});
  EXPECT_DOUBLE_EQ(cm.KvBytesPerLayer(1000), 4096.0 * 1000);
  const blend::StageCost c = cm.PrefillLayer(1, 0);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 218103808 + 4.0 * 32 * 128 * 1);
}

TEST(PlanCommand, TableJsonAndErrors) {
  PlanCommandOptions o;
  o.model = "llama-3-8b";
  o.hardware = "h100-sxm";
  o.nvme_gbs = 3.5;
  std::ostringstream table;
  absl::StatusOr<blend::Plan> p = RunPlanCommand(o, table);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->hardware.ssd_tier_bw, 3.5e9);
  EXPECT_NE(table.str().find("full-prefill"), std::string::npos) << table.str();
  o.json = true;
  std::ostringstream json;
  ASSERT_TRUE(RunPlanCommand(o, json).ok());
  EXPECT_EQ(json.str().front(), '{');
  o.hardware = "no-such-gpu";
  absl::StatusOr<blend::Plan> bad = RunPlanCommand(o, json);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("h100-sxm"), std::string::npos);
  o.hardware = "h100-sxm";
  // Kernel-rate overrides reach the hardware spec; malformed ones are refused.
  o.json = false;
  o.gemm_gflops_by_rows = "512:20,1:5";
  o.attention_gflops = 70;
  absl::StatusOr<blend::Plan> rates = RunPlanCommand(o, json);
  ASSERT_TRUE(rates.ok()) << rates.status();
  ASSERT_EQ(rates->hardware.gemm_flops_at_rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rates->hardware.gemm_flops_at_rows[0].first, 1);  // sorted
  EXPECT_DOUBLE_EQ(rates->hardware.gemm_flops_at_rows[1].second, 20e9);
  EXPECT_DOUBLE_EQ(rates->hardware.attention_flops, 70e9);
  o.gemm_gflops_by_rows = "512=20";
  EXPECT_EQ(RunPlanCommand(o, json).status().code(), absl::StatusCode::kInvalidArgument);
  o.gemm_gflops_by_rows.clear();
  o.model = "no-such-model";
  EXPECT_EQ(RunPlanCommand(o, json).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlanCommand, CpuSpecFromCeilings) {
  CpuCeilings c;
  c.sgemm_flops = 20e9;
  c.copy_bytes_per_s = 8e9;
  c.file_read_bytes_per_s = 1e9;
  const blend::HardwareSpec h = CpuHardwareSpec(c, 0.5);
  EXPECT_DOUBLE_EQ(h.peak_flops, 10e9);
  EXPECT_DOUBLE_EQ(h.mem_bw, 8e9);
  EXPECT_DOUBLE_EQ(h.ram_tier_bw, 8e9);
  EXPECT_DOUBLE_EQ(h.ssd_tier_bw, 1e9);
  CpuMeasureOptions mo;
  mo.gemm_n = 128;
  mo.copy_bytes = 1 << 20;
  mo.file_bytes = 0;
  absl::StatusOr<CpuCeilings> m = MeasureCpu(mo);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->sgemm_flops, 1e6);
  EXPECT_GT(m->copy_bytes_per_s, 1e6);
}

TEST(PlanCommand, MeasureCpuTimesTheModelKernels) {
  CpuMeasureOptions mo;
  mo.gemm_n = 64;
  mo.copy_bytes = 1 << 20;
  mo.file_bytes = 0;
  mo.runs = 1;
  absl::StatusOr<blend::ModelShape> shape = ResolveModelShape(
      "synthetic:layers=2,dim=64,heads=4,kv_heads=2,ffn=128,vocab=300,ctx=512", true);
  ASSERT_TRUE(shape.ok()) << shape.status();
  mo.model = *shape;
  mo.gemm_rows = {32, 1, 8};
  mo.attention_rows = 16;
  mo.attention_keys = 128;
  mo.row_op_rows = 32;
  mo.alloc_bytes = 1 << 20;
  absl::StatusOr<CpuCeilings> c = MeasureCpu(mo);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->gemm_flops_at_rows.size(), 3u);
  EXPECT_EQ(c->gemm_flops_at_rows.front().first, 1);  // sorted by rows
  EXPECT_EQ(c->gemm_flops_at_rows.back().first, 32);
  for (const auto& [rows, flops] : c->gemm_flops_at_rows) EXPECT_GT(flops, 0) << rows;
  EXPECT_GT(c->attention_flops, 0);
  EXPECT_GT(c->row_op_bytes_per_s, 0);
  EXPECT_GT(c->rerotate_bytes_per_s, 0);
  EXPECT_GT(c->alloc_bytes_per_s, 0);
  const blend::HardwareSpec h = CpuHardwareSpec(*c);
  EXPECT_EQ(h.gemm_flops_at_rows, c->gemm_flops_at_rows);
  EXPECT_DOUBLE_EQ(h.attention_flops, c->attention_flops);
  EXPECT_NE(DescribeKernelRates(*c).find("attention"), std::string::npos);
  // Without a model the kernel rates stay unset.
  mo.model = {};
  absl::StatusOr<CpuCeilings> bare = MeasureCpu(mo);
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->gemm_flops_at_rows.empty());
  EXPECT_EQ(bare->attention_flops, 0);
}

TEST(PlanCommand, MedianCeilingsFieldWise) {
  std::vector<CpuCeilings> v(3);
  const double attn[] = {5, 1, 3}, gemm1[] = {10, 30, 20}, alloc[] = {7, 9, 8};
  for (int i = 0; i < 3; ++i) {
    v[i].attention_flops = attn[i];
    v[i].alloc_bytes_per_s = alloc[i];
    v[i].gemm_flops_at_rows = {{1, gemm1[i]}, {64, 100.0 + i}};
  }
  const CpuCeilings m = MedianCeilings(v);
  EXPECT_DOUBLE_EQ(m.attention_flops, 3);
  EXPECT_DOUBLE_EQ(m.alloc_bytes_per_s, 8);
  ASSERT_EQ(m.gemm_flops_at_rows.size(), 2u);
  EXPECT_DOUBLE_EQ(m.gemm_flops_at_rows[0].first, 1);
  EXPECT_DOUBLE_EQ(m.gemm_flops_at_rows[0].second, 20);
  EXPECT_DOUBLE_EQ(m.gemm_flops_at_rows[1].second, 101);
  v.pop_back();  // even count: mean of the middle two
  EXPECT_DOUBLE_EQ(MedianCeilings(v).attention_flops, 3);
  EXPECT_EQ(MedianCeilings({}).attention_flops, 0);
}

TEST(BenchTtft, SmokeTinyModelWritesOutputs) {
  char tmpl[] = "/tmp/ragkv-ttft-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  TtftBenchOptions o;
  // vocab >= 259: the sidecar tokenizes the ingested chunk text with the
  // byte tokenizer.
  o.model_spec = "synthetic:layers=2,dim=64,heads=4,kv_heads=2,ffn=128,vocab=300,ctx=512";
  o.path = "both";
  o.prompts = 2;
  o.chunks = 2;
  o.chunk_tokens = 32;
  o.query_tokens = 8;
  o.ratios = {0.15, 0.30};
  o.tiers = {"ram", "ssd"};
  o.ssd_cold = "fadvise";  // never drop the whole machine's page cache in a test
  o.concurrency = {1, 2};
  o.load_requests = 4;
  o.context_sweep = {1, 2};
  o.multi_user_requests = 6;
  o.pool_chunks = 5;
  o.ram_budget_chunks = 2;
  o.multi_user_concurrency = 2;
  o.calibration.gemm_n = 256;
  o.calibration.copy_bytes = 8 << 20;
  o.calibration.file_bytes = 4 << 20;
  o.calibration.gemm_rows = {1, 16, 64};
  o.calibration.runs = 1;
  o.calibrate_every = 4;  // several calibrations during the matrix
  o.work_dir = dir + "/work";
  o.out_dir = dir + "/out";
  std::ostringstream log;
  absl::StatusOr<TtftReport> r = RunTtftBench(o, log);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << log.str();
  // In-process and gRPC (one sidecar per tier, its only KV tier): each
  // full-prefill + per tier (prefix, reuse, 2 ratios, controller); plus,
  // in process, the gate's row per tier.
  EXPECT_EQ(r->rows.size(), 2 * (1u + 2 * 5) + 2);
  int grpc_rows = 0, gate_rows = 0;
  for (const TtftRow& row : r->rows) {
    if (row.strategy != "gate") continue;
    ++gate_rows;
    EXPECT_EQ(row.path, "inproc");
    // No calibration record: the uncalibrated default ratio.
    EXPECT_NEAR(row.ratio, 0.15, 1e-9) << row.tier;
  }
  EXPECT_EQ(gate_rows, 2);
  std::set<std::string> grpc_controller_tiers;
  for (const TtftRow& row : r->rows) {
    EXPECT_EQ(row.ttft.count, 2u) << row.strategy << " " << row.tier << " " << row.path;
    EXPECT_GT(row.ttft.p50, 0);
    if (row.path == "grpc") {
      ++grpc_rows;
      EXPECT_EQ(row.median.path, "grpc");
      EXPECT_GT(row.median.rpc_engine_ttft_s, 0) << row.strategy;
      // The client's TTFT includes the engine's.
      EXPECT_GE(row.median.ttft_s, row.median.rpc_engine_ttft_s) << row.strategy;
      if (row.strategy == "controller") {
        // BLEND_MODE_AUTO: the sidecar's controller chose r in [floor, ceiling].
        grpc_controller_tiers.insert(row.tier);
        EXPECT_GE(row.ratio, 0.15 - 1e-6);
        EXPECT_LE(row.ratio, 0.5 + 1e-6);
      }
      // Context: 2 chunks of 32 byte tokens from the sidecar's catalogue.
      EXPECT_EQ(row.median.context_tokens, 64) << row.strategy;
      // A blend recomputes its share of the rows: the sidecar's prefix
      // cache holds only what the previous prompt shares with this one
      // (nothing), not this prompt's rows stored by an earlier row.
      if (row.strategy == "blend") {
        EXPECT_GE(row.median.recomputed_rows, row.ratio * 64 - 2) << row.tier << " " << row.ratio;
      }
      if (row.strategy == "full-prefill") {
        EXPECT_EQ(row.wire_mb, 0);
      } else {
        // Fused f16 KV (the engine's default wire dtype): 2 layers x {K,V} x
        // 2 kv heads x 16 dims x (64 + 8) x 2 B.
        EXPECT_DOUBLE_EQ(row.wire_mb, 2.0 * 2 * 2 * 16 * 72 * 2 / 1e6) << row.strategy;
        EXPECT_GT(row.median.rpc_blend_s, 0) << row.strategy;
      }
      // Transport = gRPC p50 - the in-process twin's p50.
      for (const TtftRow& twin : r->rows) {
        if (twin.path == "inproc" && twin.strategy == row.strategy && twin.tier == row.tier &&
            twin.ratio == row.ratio) {
          EXPECT_DOUBLE_EQ(row.transport_s, row.ttft.p50 - twin.ttft.p50) << row.strategy;
        }
      }
      continue;
    }
    EXPECT_GT(row.predicted_cal_s, 0);
    EXPECT_GT(row.predicted_raw_s, 0);
    if (row.strategy == "full-prefill") {
      EXPECT_EQ(row.kv_mb, 0) << row.strategy;
    } else {
      EXPECT_GT(row.kv_mb, 0) << row.strategy << " " << row.tier;
    }
  }
  // The prefix rows are served prefix caching: no stored block (the two
  // prompts share no leading block; what a prompt stored is forgotten before
  // its next row), so the leading chunk's own record, exact at position 0:
  // half of what full reuse moves (both chunks, 32 tokens each).
  double prefix_mb = -1, reuse_mb = 0;
  for (const TtftRow& row : r->rows) {
    if (row.tier != "ram" || row.path != "inproc") continue;
    if (row.strategy == "prefix") prefix_mb = row.kv_mb;
    if (row.strategy == "full-reuse") reuse_mb = row.kv_mb;
  }
  EXPECT_GT(reuse_mb, 0);
  EXPECT_NEAR(prefix_mb, reuse_mb / 2, 1e-9);
  EXPECT_EQ(grpc_rows, 11);
  EXPECT_EQ(grpc_controller_tiers, (std::set<std::string>{"ram", "ssd"}));
  EXPECT_GT(r->efficiency, 0);
  EXPECT_NE(r->markdown.find("| strategy | tier |"), std::string::npos);
  EXPECT_NE(r->markdown.find("Multi-user"), std::string::npos);
  EXPECT_NE(r->markdown.find("gRPC path by stage"), std::string::npos);
  EXPECT_NE(r->markdown.find("Prediction by stage"), std::string::npos);
  // The calibration measured this model's kernels.
  EXPECT_EQ(r->cpu.gemm_flops_at_rows.size(), 3u);
  EXPECT_GT(r->cpu.attention_flops, 0);
  EXPECT_GT(r->cpu.row_op_bytes_per_s, 0);
  EXPECT_GT(r->cpu.rerotate_bytes_per_s, 0);
  EXPECT_GT(r->cpu.alloc_bytes_per_s, 0);
  for (const char* f : {"samples.csv", "samples.json", "summary.md"}) {
    const std::string path = o.out_dir + "/" + f;
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    EXPECT_GT(std::filesystem::file_size(path), 0u) << path;
  }
  {
    std::ifstream csv(o.out_dir + "/samples.csv");
    std::stringstream all;
    all << csv.rdbuf();
    EXPECT_NE(all.str().find(",grpc,"), std::string::npos);
  }
  if (std::system("gnuplot --version >/dev/null 2>&1") == 0) {
    for (const char* f : {"ttft_vs_ratio.png", "speedup_vs_context.png", "ttft_cdf_load.png"}) {
      const std::string path = o.out_dir + "/" + f;
      ASSERT_TRUE(std::filesystem::exists(path)) << path;
      EXPECT_GT(std::filesystem::file_size(path), 1000u) << path;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// The prefix rows are served requests in prefix-caching mode (the request
// pipeline): the first request of a prompt finds nothing and stores its
// blocks (and its documents, which missed); the same prompt again is served
// every whole block; after ForgetUnsharedPrefix against a previous prompt
// that shares its first chunk, the 32 shared block rows are shorter than
// the first chunk's own stored record (40 rows), which then serves it.
TEST(BenchTtftPrefix, StoredBlocksServeTheNextRequest) {
  namespace ti = ragkv::services::ttft_internal;
  auto spec = model::ParseSyntheticSpec("layers=2,dim=64,heads=4,kv_heads=2,ffn=128,vocab=300,ctx=512");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto m = model::MakeSyntheticModel(*spec);
  ASSERT_TRUE(m.ok()) << m.status();
  auto blender = blend::Blender::Create({m->get()});
  ASSERT_TRUE(blender.ok()) << blender.status();
  auto tier = kvstore::CreateRamTier({});
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<std::shared_ptr<kvstore::Tier>> tiers = {std::move(tier).value()};
  auto store = kvstore::TieredStore::Create({}, tiers);
  ASSERT_TRUE(store.ok()) << store.status();
  ti::TierStore ts;
  ts.name = "ram";
  ts.store = std::move(store).value();
  auto tokens = [](int n, int seed) {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = 3 + (seed * 131 + i * 17) % 290;
    return t;
  };
  ti::Prompt p, prev;
  p.chunks = {tokens(40, 1), tokens(45, 2)};  // 85 tokens: 5 whole blocks
  p.query = tokens(8, 3);
  prev.chunks = {tokens(40, 1), tokens(30, 4)};  // shares the first chunk: 2 whole blocks
  EXPECT_EQ(ti::SharedPrefixTokens(ti::ContextTokens(p), ti::ContextTokens(prev)), 32);
  const ti::Request rq{blend::Strategy::kPrefixReuse, false, 0, &ts, -1};
  auto first = ti::RunRequest(**blender, nullptr, **m, p, rq);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->prefix_tokens, 0);
  EXPECT_EQ(first->kv_bytes, 0u);
  EXPECT_EQ(first->context, 85);
  auto again = ti::RunRequest(**blender, nullptr, **m, p, rq);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->prefix_tokens, 80);
  EXPECT_LT(again->recomputed, first->recomputed);
  ASSERT_TRUE(ti::ForgetUnsharedPrefix(ts.store.get(), (*m)->fingerprint(), ti::ContextTokens(p),
                                       ti::ContextTokens(prev))
                  .ok());
  auto after = ti::RunRequest(**blender, nullptr, **m, p, rq);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->prefix_tokens, 0);
  EXPECT_LT(after->recomputed, first->recomputed);
  EXPECT_GT(after->recomputed, again->recomputed);
}

// Corpus mode takes the first --prompts questions of the dev/test split
// (retrieval/qa_split.h) in file order, all of them when the split has
// fewer, and says which split and how many in the workload line.
TEST(BenchTtftWorkload, CorpusQuestionsComeFromTheSplit) {
  const char* env = std::getenv("RAGKV_TEST_CORPUS");
  const std::string path = (env != nullptr && *env != '\0' ? std::string(env)
                                                           : RAGKV_SOURCE_DIR + "/../shared/corpus") +
                           "/musique_dev.json";
  RAGKV_REQUIRE_OR_SKIP(std::filesystem::exists(path)) << "no corpus at " << path;
  auto corpus = retrieval::ReadCorpusFile(path);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  TtftBenchOptions o;
  o.model_spec = "synthetic:layers=1,dim=64,heads=2,kv_heads=2,ffn=128,vocab=300";
  o.corpus = path;
  o.chunks = 1;
  o.chunk_tokens = 8;
  o.prompts = 100;
  ttft_internal::TokenRng rng(1, 300);
  for (const char* split : {"dev", "test", "all"}) {
    o.split = split;
    auto w = ttft_internal::BuildWorkload(o, 300, /*with_grpc=*/true, rng);
    ASSERT_TRUE(w.ok()) << w.status();
    auto want = retrieval::FilterQaSplit(corpus->questions, *retrieval::ParseQaSplit(split));
    ASSERT_EQ(w->prompts.size(), want.size()) << split;
    EXPECT_EQ(w->split, split);
    EXPECT_EQ(w->split_questions, static_cast<int>(want.size()));
    EXPECT_EQ(w->file_questions, 100);
    for (size_t i = 0; i < want.size(); ++i) {  // file order: each question's first passage
      const std::string& doc = want[i].passage_doc_ids[0];
      for (const auto& d : corpus->documents) {
        if (d.id == doc) EXPECT_EQ(w->prompts[i].texts[0], d.text) << split << " " << i;
      }
    }
    EXPECT_NE(w->description.find(absl::StrCat("split ", split, " (", want.size(),
                                               " of its 100 questions)")),
              std::string::npos) << w->description;
    EXPECT_EQ(w->description.find("all used") != std::string::npos, want.size() < 100u)
        << w->description;
  }
  o.split = "train";
  auto bad = ttft_internal::BuildWorkload(o, 300, true, rng);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--split"), std::string::npos) << bad.status();
}

TEST(BenchTtft, RejectsBadOptions) {
  TtftBenchOptions o;
  o.chunks = 0;
  std::ostringstream log;
  EXPECT_EQ(RunTtftBench(o, log).status().code(), absl::StatusCode::kInvalidArgument);
  o.chunks = 1;
  o.ratios = {1.5};
  EXPECT_EQ(RunTtftBench(o, log).status().code(), absl::StatusCode::kInvalidArgument);
  o.ratios = {0.15};
  o.path = "carrier-pigeon";
  EXPECT_EQ(RunTtftBench(o, log).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ragkv::services
