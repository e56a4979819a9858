#include "services/ttft_cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "services/cli.h"
#include "services/bench_ttft.h"
#include "services/plan_cmd.h"

namespace ragkv::services {
namespace {

TtftBenchOptions g_ttft;
std::string g_ttft_kv = "f16";
PlanCommandOptions g_plan;
CLI::App* g_ttft_cmd = nullptr;
CLI::App* g_plan_cmd = nullptr;

int RunTtft() {
  TtftBenchOptions o = g_ttft;
  if (g_ttft_kv == "f32") {
    o.kv_dtype = kernels::DType::kF32;
  } else if (g_ttft_kv == "bf16") {
    o.kv_dtype = kernels::DType::kBF16;
  } else if (g_ttft_kv != "f16") {
    std::fprintf(stderr, "ragkv bench ttft: --kv-dtype must be f16, bf16 or f32\n");
    return 2;
  }
  absl::StatusOr<TtftReport> r = RunTtftBench(o, std::cout);
  if (!r.ok()) {
    std::fprintf(stderr, "ragkv bench ttft: %s\n", r.status().ToString().c_str());
    return 1;
  }
  return 0;
}

int RunPlan() {
  absl::StatusOr<blend::Plan> p = RunPlanCommand(g_plan, std::cout);
  if (!p.ok()) {
    std::fprintf(stderr, "ragkv plan: %s\n", p.status().ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterTtftSubcommands(CLI::App* app) {
  CLI::App* bench = BenchCommand(app);
  TtftBenchOptions& t = g_ttft;
  g_ttft_cmd = bench->add_subcommand(
      "ttft", "TTFT of every strategy x KV tier on the same prompts, under load, vs the planner");
  g_ttft_cmd->add_option("--model", t.model_spec, "checkpoint or synthetic:... spec")
      ->capture_default_str();
  g_ttft_cmd->add_option("--max-seq-len", t.max_seq_len, "context override");
  g_ttft_cmd->add_option("--tokenizer", t.tokenizer, "corpus mode tokenizer");
  g_ttft_cmd->add_option("--corpus", t.corpus, "MuSiQue-style JSON (default: synthetic shapes)");
  g_ttft_cmd->add_option("--prompts", t.prompts)->capture_default_str();
  g_ttft_cmd->add_option("--chunks", t.chunks)->capture_default_str();
  g_ttft_cmd->add_option("--chunk-tokens", t.chunk_tokens)->capture_default_str();
  g_ttft_cmd->add_option("--query-tokens", t.query_tokens)->capture_default_str();
  g_ttft_cmd->add_option("--ratios", t.ratios, "CacheBlend ratios")->delimiter(',')
      ->capture_default_str();
  g_ttft_cmd->add_option("--r-min", t.r_min, "controller quality floor")->capture_default_str();
  g_ttft_cmd->add_option("--tiers", t.tiers, "ram,ssd,redis")->delimiter(',')
      ->capture_default_str();
  g_ttft_cmd->add_option("--repeats", t.repeats, "passes over the prompts")->capture_default_str();
  g_ttft_cmd->add_option("--kv-dtype", g_ttft_kv, "f16|bf16|f32")->capture_default_str();
  g_ttft_cmd->add_option("--ssd-cold", t.ssd_cold, "auto|drop|fadvise|direct|none")
      ->capture_default_str();
  g_ttft_cmd->add_option("--redis", t.redis, "host:port (default: a private redis-server)");
  g_ttft_cmd->add_option("--work-dir", t.work_dir, "scratch dir (default: fresh /tmp dir)");
  g_ttft_cmd->add_option("--concurrency", t.concurrency, "load levels")->delimiter(',')
      ->capture_default_str();
  g_ttft_cmd->add_option("--load-requests", t.load_requests, "requests per load level")
      ->capture_default_str();
  g_ttft_cmd->add_option("--load-ratio", t.load_ratio, "ratio of load/sweep/multi-user")
      ->capture_default_str();
  g_ttft_cmd->add_option("--context-sweep", t.context_sweep, "chunk counts")->delimiter(',')
      ->capture_default_str();
  g_ttft_cmd->add_option("--multi-user", t.multi_user_requests, "requests (0: off)")
      ->capture_default_str();
  g_ttft_cmd->add_option("--pool-chunks", t.pool_chunks)->capture_default_str();
  g_ttft_cmd->add_option("--ram-budget-chunks", t.ram_budget_chunks)->capture_default_str();
  g_ttft_cmd->add_option("--zipf", t.zipf_s)->capture_default_str();
  g_ttft_cmd->add_option("--multi-user-concurrency", t.multi_user_concurrency)
      ->capture_default_str();
  g_ttft_cmd->add_option("--quality-prompts", t.quality_prompts,
                         "quality bench prompts on the same model (0: off)")
      ->capture_default_str();
  g_ttft_cmd->add_option("--path", t.path,
                         "inproc|grpc|both: in-process Blender and/or client -> sidecar engine "
                         "over loopback gRPC")
      ->capture_default_str();
  g_ttft_cmd->add_option("--calibrate-every", t.calibrate_every,
                         "re-measure kernel rates every N matrix requests (0: once)")
      ->capture_default_str();
  g_ttft_cmd->add_option("--out", t.out_dir, "CSV/JSON/Markdown/PNG output dir");
  g_ttft_cmd->add_option("--plots", t.plots)->capture_default_str();
  g_ttft_cmd->add_option("--seed", t.seed)->capture_default_str();

  PlanCommandOptions& p = g_plan;
  g_plan_cmd = app->add_subcommand("plan", "roofline TTFT prediction per strategy and tier");
  g_plan_cmd->add_option("--model", p.model, "preset or checkpoint/synthetic spec")
      ->capture_default_str();
  g_plan_cmd->add_option("--hardware", p.hardware, "preset")->capture_default_str();
  g_plan_cmd->add_flag("--calibrate-cpu", p.calibrate_cpu,
                       "hardware := this CPU's measured sgemm/memcpy/file-read ceilings (f32)");
  g_plan_cmd->add_option("--cpu-efficiency", p.cpu_efficiency, "x measured sgemm peak")
      ->capture_default_str();
  g_plan_cmd->add_option("--peak-tflops", p.peak_tflops, "override");
  g_plan_cmd->add_option("--hbm-gbs", p.hbm_gbs, "override");
  g_plan_cmd->add_option("--host-gbs", p.host_gbs, "override (RAM tier link)");
  g_plan_cmd->add_option("--nvme-gbs", p.nvme_gbs, "override (SSD tier)");
  g_plan_cmd->add_option("--net-gbs", p.net_gbs, "override (remote tier)");
  g_plan_cmd->add_option("--layer-overhead-us", p.layer_overhead_us, "override");
  g_plan_cmd->add_option("--gemm-gflops-by-rows", p.gemm_gflops_by_rows,
                         "override: layer GEMM rate by row count, rows:gflops,...");
  g_plan_cmd->add_option("--attention-gflops", p.attention_gflops, "override");
  g_plan_cmd->add_option("--row-op-gbs", p.row_op_gbs, "override (norms, RoPE, SwiGLU)");
  g_plan_cmd->add_option("--rerotate-gbs", p.rerotate_gbs, "override (key re-rotation)");
  g_plan_cmd->add_option("--alloc-gbs", p.alloc_gbs, "override (fused-cache allocation)");
  g_plan_cmd->add_option("--chunks", p.workload.chunks)->capture_default_str();
  g_plan_cmd->add_option("--chunk-tokens", p.workload.chunk_tokens)->capture_default_str();
  g_plan_cmd->add_option("--query-tokens", p.workload.query_tokens)->capture_default_str();
  g_plan_cmd->add_option("--ratios", p.workload.ratios)->delimiter(',')->capture_default_str();
  g_plan_cmd->add_option("--r-min", p.workload.r_min)->capture_default_str();
  g_plan_cmd->add_option("--r-max", p.workload.r_max)->capture_default_str();
  g_plan_cmd->add_flag("--json", p.json, "JSON instead of the table");
}

bool RunTtftSubcommands(int* rc) {
  if (g_ttft_cmd != nullptr && g_ttft_cmd->parsed()) {
    *rc = RunTtft();
    return true;
  }
  if (g_plan_cmd != nullptr && g_plan_cmd->parsed()) {
    *rc = RunPlan();
    return true;
  }
  return false;
}

}  // namespace ragkv::services
