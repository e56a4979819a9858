#include "services/bench_cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "blend/bench_blend.h"
#include "blend/bench_quality.h"
#include "kernels/cpu.h"
#include "kvstore/bench_kvstore.h"
#include "kvstore/bench_redis.h"
#include "kvstore/process_tuning.h"
#include "model/bench_prefill.h"
#include "services/cli.h"

namespace ragkv::services {
namespace {

struct Flags {
  model::PrefillBenchOptions prefill;
  std::string prefill_synthetic;
  kvstore::KvBenchOptions kv;
  bool kv_small = false, kv_large = false;
  std::string kv_redis;
  blend::BlendBenchOptions blend;
  std::string blend_kv = "f16";
  blend::QualityBenchOptions quality;
  std::string quality_kv = "f32";
};

Flags& F() {
  static Flags* f = new Flags;
  return *f;
}

CLI::App* g_prefill = nullptr;
CLI::App* g_kv = nullptr;
CLI::App* g_blend = nullptr;
CLI::App* g_quality = nullptr;

bool ParseKvDtype(const std::string& s, kernels::DType* out) {
  if (s == "f32") {
    *out = kernels::DType::kF32;
  } else if (s == "f16") {
    *out = kernels::DType::kF16;
  } else if (s == "bf16") {
    *out = kernels::DType::kBF16;
  } else {
    return false;
  }
  return true;
}

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "ragkv bench %s: %s\n", what, s.ToString().c_str());
  return 1;
}

int RunPrefill() {
  model::PrefillBenchOptions o = F().prefill;
  if (!F().prefill_synthetic.empty()) o.model = "synthetic:" + F().prefill_synthetic;
  auto r = model::RunPrefillBench(o);
  if (!r.ok()) return Fail("prefill", r.status());
  model::PrintPrefillBench(*r, std::cout);
  return 0;
}

int RunKv() {
  kvstore::KvBenchOptions o = F().kv;
  // The store bench measures I/O paths: decode on one kernel thread.
  kernels::SetMaxThreads(1);
  kvstore::TuneMallocForLargeValues();
  if (F().kv_large) o.shapes = {kvstore::KvBenchShape{"llama8b-512tok", 512, 32, 8, 128}};
  if (F().kv_small) o.shapes = {kvstore::KvBenchShape{"stories260k-512tok", 512, 5, 4, 8}};
  kvstore::RedisBenchOptions ro;
  ro.endpoint = F().kv_redis;
  if (!ro.endpoint.empty()) {
    o.extra_rows = [ro](const kvstore::KvBenchShape& s) { return kvstore::RedisTierBenchRows(s, ro); };
  }
  auto r = kvstore::RunKvStoreBench(o, stdout);
  if (!r.ok()) return Fail("kvstore", r.status());
  return 0;
}

int RunBlend() {
  blend::BlendBenchOptions o = F().blend;
  if (!ParseKvDtype(F().blend_kv, &o.kv_dtype)) {
    std::fprintf(stderr, "ragkv bench blend: --kv-dtype must be f32, f16 or bf16\n");
    return 2;
  }
  auto r = blend::RunBlendBench(o, std::cout);
  if (!r.ok()) return Fail("blend", r.status());
  return 0;
}

int RunQuality() {
  blend::QualityBenchOptions o = F().quality;
  if (!ParseKvDtype(F().quality_kv, &o.kv_dtype)) {
    std::fprintf(stderr, "ragkv bench quality: --kv-dtype must be f32, f16 or bf16\n");
    return 2;
  }
  auto r = blend::RunQualityBench(o, std::cout);
  if (!r.ok()) return Fail("quality", r.status());
  return 0;
}

}  // namespace

void RegisterBenchSubcommands(CLI::App* app) {
  CLI::App* bench = BenchCommand(app);
  Flags& f = F();

  g_prefill = bench->add_subcommand("prefill", "full-prefill tokens/s vs the same run's sgemm roofline");
  g_prefill->add_option("--model", f.prefill.model, "checkpoint or synthetic:... spec")
      ->capture_default_str();
  g_prefill->add_option("--synthetic", f.prefill_synthetic,
                        "synthetic shape, e.g. layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000");
  g_prefill->add_option("--tokens", f.prefill.tokens, "prompt lengths")->delimiter(',')
      ->capture_default_str();
  g_prefill->add_option("--repeats", f.prefill.repeats)->capture_default_str();
  g_prefill->add_option("--sgemm-n", f.prefill.sgemm_n)->capture_default_str();
  g_prefill->add_option("--threads", f.prefill.threads, "kernel threads (0: --kernel-threads)");

  g_kv = bench->add_subcommand("kvstore", "RAM/SSD/Redis tier reads vs memcpy, O_DIRECT, hiredis");
  g_kv->add_option("--dir", f.kv.dir, "scratch dir on the SSD under test")->capture_default_str();
  g_kv->add_option("--chunks", f.kv.chunks)->capture_default_str();
  g_kv->add_option("--threads", f.kv.threads, "concurrent readers")->capture_default_str();
  g_kv->add_option("--repeats", f.kv.repeats)->capture_default_str();
  g_kv->add_flag("--small", f.kv_small, "only the stories260K-sized chunk");
  g_kv->add_flag("--large", f.kv_large, "only the 64 MiB Llama-8B-sized chunk");
  g_kv->add_option("--redis", f.kv_redis, "host:port: add the Redis tier rows");

  g_blend = bench->add_subcommand("blend", "blend time vs full prefill, per-stage breakdown");
  g_blend->add_option("--model", f.blend.model_spec)->capture_default_str();
  g_blend->add_option("--chunks", f.blend.chunks)->capture_default_str();
  g_blend->add_option("--chunk-tokens", f.blend.chunk_tokens)->capture_default_str();
  g_blend->add_option("--query-tokens", f.blend.query_tokens)->capture_default_str();
  g_blend->add_option("--ratios", f.blend.ratios)->delimiter(',')->capture_default_str();
  g_blend->add_option("--repeats", f.blend.repeats)->capture_default_str();
  g_blend->add_option("--kv-dtype", f.blend_kv, "f16|bf16|f32")->capture_default_str();
  g_blend->add_option("--seed", f.blend.seed)->capture_default_str();

  g_quality = bench->add_subcommand(
      "quality", "KL / top-1 / dNLL of every strategy vs full prefill on self-sampled prompts");
  g_quality->add_option("--model", f.quality.model_path, "checkpoint (.bin/.gguf/HF dir)")
      ->required();
  g_quality->add_option("--prompts", f.quality.prompts)->capture_default_str();
  g_quality->add_option("--seed", f.quality.seed)->capture_default_str();
  g_quality->add_option("--chunks", f.quality.chunks)->capture_default_str();
  g_quality->add_option("--chunk-tokens-min", f.quality.chunk_tokens_min)->capture_default_str();
  g_quality->add_option("--chunk-tokens-max", f.quality.chunk_tokens_max)->capture_default_str();
  g_quality->add_option("--query-tokens", f.quality.query_tokens)->capture_default_str();
  g_quality->add_option("--ratios", f.quality.ratios)->delimiter(',')->capture_default_str();
  g_quality->add_option("--kv-dtype", f.quality_kv, "f32|f16|bf16")->capture_default_str();
  g_quality->add_option("--csv", f.quality.csv_path, "write per-strategy CSV");
  g_quality->add_option("--png", f.quality.png_path, "plot quality vs r (gnuplot)");
}

bool RunBenchSubcommands(int* rc) {
  if (g_prefill != nullptr && g_prefill->parsed()) {
    *rc = RunPrefill();
  } else if (g_kv != nullptr && g_kv->parsed()) {
    *rc = RunKv();
  } else if (g_blend != nullptr && g_blend->parsed()) {
    *rc = RunBlend();
  } else if (g_quality != nullptr && g_quality->parsed()) {
    *rc = RunQuality();
  } else {
    return false;
  }
  return true;
}

}  // namespace ragkv::services
