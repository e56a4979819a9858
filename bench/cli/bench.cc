// bench/cli/bench.cc: the small `ragkv bench` families (prefill, kvstore,
// blend, quality); the larger ones are in bench_retrieval.cc, bench_ttft.cc
// and bench_load.cc, the table of them all in bench_main.cc (ragkv-bench).
// The harnesses themselves live in bench/<module>/.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "bench/blend/bench_blend.h"
#include "bench/blend/bench_oracle.h"
#include "bench/blend/bench_quality.h"
#include "blend/xchunk_task.h"
#include "bench/kvstore/bench_kvstore.h"
#include "bench/kvstore/bench_redis.h"
#include "bench/model/bench_prefill.h"
#include "bench/model/llamacpp_runner.h"
#include "bench/model/synthetic_gguf.h"
#include "cli/command.h"
#include "cli/flags.h"
#include "kernels/cpu.h"
#include "kvstore/process_tuning.h"
#include "retrieval/qa_split.h"

namespace ragkv::cli {
namespace {

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "ragkv bench %s: %s\n", what, s.ToString().c_str());
  return 1;
}

class BenchPrefillCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--model", o_.model, "checkpoint or synthetic:... spec")->capture_default_str();
    cmd->add_option("--synthetic", synthetic_,
                    "synthetic shape, e.g. layers=8,dim=512,heads=8,kv_heads=4,ffn=1408,vocab=32000");
    cmd->add_option("--tokens", o_.tokens, "prompt lengths")->delimiter(',')->capture_default_str();
    cmd->add_option("--repeats", o_.repeats)->capture_default_str();
    cmd->add_option("--sgemm-n", o_.sgemm_n)->capture_default_str();
    cmd->add_option("--threads", o_.threads, "kernel threads (0: --kernel-threads)");
    cmd->add_option("--compare", o_.compare,
                    "llama.cpp: the same GGUF through the pinned llama.cpp, interleaved");
    cmd->add_option("--llamacpp-dir", o_.llamacpp_dir,
                    "llama.cpp library dir (default: scripts/setup-llamacpp's)");
    cmd->add_option(
        "--llamacpp-cpu", o_.llamacpp_cpu,
        "load only this llama.cpp CPU variant (e.g. haswell: its AVX2 build, to set beside "
        "RAGKV_ISA=avx2); default: the best for this CPU");
    cmd->add_option("--encoding", o_.encoding,
                    "synthetic model's GGUF encoding under --compare: f32|f16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k_m|"
                    "q5_k_m|q6_k")
        ->capture_default_str();
    cmd->add_option("--write-gguf", write_gguf_,
                    "only write the synthetic: or moe: --model as a GGUF in --encoding here, and exit");
  }
  int Run() override {
    model::PrefillBenchOptions o = o_;
    if (!synthetic_.empty()) o.model = "synthetic:" + synthetic_;
    if (!write_gguf_.empty()) {
      const absl::Status s = model::WriteSyntheticGguf(
          o.model, o.encoding,
          o.llamacpp_dir.empty() ? model::LlamaCppRunner::DefaultLibDir() : o.llamacpp_dir,
          write_gguf_);
      return s.ok() ? 0 : Fail("prefill --write-gguf", s);
    }
    auto r = model::RunPrefillBench(o);
    if (!r.ok()) return Fail("prefill", r.status());
    model::PrintPrefillBench(*r, std::cout);
    return 0;
  }

 private:
  model::PrefillBenchOptions o_;
  std::string synthetic_, write_gguf_;
};

class BenchKvstoreCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--dir", o_.dir, "scratch dir on the SSD under test")->capture_default_str();
    cmd->add_option("--chunks", o_.chunks)->capture_default_str();
    cmd->add_option("--threads", o_.threads, "concurrent readers")->capture_default_str();
    cmd->add_option("--repeats", o_.repeats)->capture_default_str();
    cmd->add_flag("--small", small_, "only the stories260K-sized chunk");
    cmd->add_flag("--large", large_, "only the 64 MiB Llama-8B-sized chunk");
    cmd->add_option("--redis", redis_, "host:port: add the Redis tier rows");
  }
  int Run() override {
    kvstore::KvBenchOptions o = o_;
    // The store bench measures I/O paths: decode on one kernel thread.
    kernels::SetMaxThreads(1);
    kvstore::TuneMallocForLargeValues();
    if (large_) o.shapes = {kvstore::KvBenchShape{"llama8b-512tok", 512, 32, 8, 128}};
    if (small_) o.shapes = {kvstore::KvBenchShape{"stories260k-512tok", 512, 5, 4, 8}};
    kvstore::RedisBenchOptions ro;
    ro.endpoint = redis_;
    if (!ro.endpoint.empty()) {
      o.extra_rows = [ro](const kvstore::KvBenchShape& s) {
        return kvstore::RedisTierBenchRows(s, ro);
      };
    }
    auto r = kvstore::RunKvStoreBench(o, stdout);
    if (!r.ok()) return Fail("kvstore", r.status());
    return 0;
  }

 private:
  kvstore::KvBenchOptions o_;
  bool small_ = false, large_ = false;
  std::string redis_;
};

class BenchBlendCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--model", o_.model_spec)->capture_default_str();
    cmd->add_option("--chunks", o_.chunks)->capture_default_str();
    cmd->add_option("--chunk-tokens", o_.chunk_tokens)->capture_default_str();
    cmd->add_option("--query-tokens", o_.query_tokens)->capture_default_str();
    cmd->add_option("--ratios", o_.ratios)->delimiter(',')->capture_default_str();
    cmd->add_option("--repeats", o_.repeats)->capture_default_str();
    cmd->add_option("--kv-dtype", kv_, "f16|bf16|f32")->capture_default_str();
    cmd->add_option("--seed", o_.seed)->capture_default_str();
  }
  int Run() override {
    blend::BlendBenchOptions o = o_;
    if (!ParseKvDtype(kv_, &o.kv_dtype)) {
      std::fprintf(stderr, "ragkv bench blend: --kv-dtype must be f32, f16 or bf16\n");
      return 2;
    }
    auto r = blend::RunBlendBench(o, std::cout);
    if (!r.ok()) return Fail("blend", r.status());
    return 0;
  }

 private:
  blend::BlendBenchOptions o_;
  std::string kv_ = "f16";
};

class BenchQualityCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--task", o_.task,
                    "story (self-sampled prompts) | xchunk (docs/xchunk.md) | musique (--corpus)")
        ->capture_default_str();
    cmd->add_option("--model", o_.model_path,
                    "checkpoint (.bin/.gguf/HF dir); required for story, xchunk: the instrument");
    cmd->add_option("--pairs", o_.pairs, "xchunk: key/value pairs per prompt")
        ->capture_default_str();
    cmd->add_option("--prompts", o_.prompts)->capture_default_str();
    seed_ = cmd->add_option("--seed", o_.seed)->capture_default_str();
    cmd->add_option("--split", split_,
                    "dev (odd seeds; without --seed: xchunk 1, story 7919) | test (even seeds; "
                    "without --seed: xchunk 2, story 7920) | all (any seed); "
                    "docs/quality_gate.md \"The dev/test split\"")
        ->capture_default_str();
    cmd->add_option("--chunks", o_.chunks, "passages (default: 6 story, 4 xchunk)");
    cmd->add_option("--chunk-tokens-min", o_.chunk_tokens_min)->capture_default_str();
    cmd->add_option("--chunk-tokens-max", o_.chunk_tokens_max)->capture_default_str();
    cmd->add_option("--query-tokens", o_.query_tokens)->capture_default_str();
    cmd->add_option("--ratios", o_.ratios)->delimiter(',')->capture_default_str();
    cmd->add_option("--kv-dtype", kv_, "f32|f16|bf16")->capture_default_str();
    cmd->add_option("--selector", selector_, "selector of the blend-* lines (deviation, "
                    "chunk-head, query-attention, deviation+attention, attended-deviation)")
        ->capture_default_str();
    cmd->add_option("--selectors", o_.selectors,
                    "extra recompute selectors: deviation,chunk-head,query-attention,"
                    "deviation+attention,attended-deviation")
        ->delimiter(',');
    cmd->add_option("--first-check-layer", o_.blend.first_check_layer,
                    "CacheBlend's first check layer; -1: layer 1, or the first global layer of "
                    "a sliding-window model (docs/gemma3.md rule 4)")
        ->capture_default_str();
    cmd->add_option("--gradual-steps", o_.blend.gradual_steps,
                    "CacheBlend's check layers of gradual filtering (docs/blend.md)")
        ->capture_default_str();
    cmd->add_option("--lookahead-layers", o_.blend.lookahead_layers,
                    "lookahead-deviation: layers past each check the look-ahead runs (0: all)")
        ->capture_default_str();
    cmd->add_flag("--adaptive", o_.adaptive, "add adaptive-ratio lines (and fixed r at their mean r)");
    cmd->add_option("--adaptive-masses", o_.adaptive_masses, "share of the estimated error each adaptive line removes")
        ->delimiter(',')->capture_default_str();
    cmd->add_option("--adaptive-thresholds", o_.adaptive_thresholds,
                    "adaptive lines by threshold (BlendOptions::adaptive_threshold; with --adaptive)")
        ->delimiter(',');
    cmd->add_option("--adaptive-max", o_.adaptive_max, "cap of the adaptive ratio")
        ->capture_default_str();
    cmd->add_option("--kv-codecs", o_.kv_codecs,
                    "store codecs measured against raw records: int8,fp8,int4 (use --kv-dtype f16 "
                    "for the raw f16 baseline)")
        ->delimiter(',')
        ->check(CLI::IsMember({"raw", "int8", "fp8", "int4"}));
    cmd->add_option("--corpus", o_.corpus,
                    "musique: MuSiQue-style JSON; --split picks its questions");
    cmd->add_option("--passages", o_.passages,
                    "musique: cut (each passage's tokens cut to --chunk-tokens-max) | chunker "
                    "(the sidecar chunker's first chunk of each passage, target "
                    "--chunk-tokens-max: bench engine's default prompts)")
        ->check(CLI::IsMember({"cut", "chunker"}))
        ->capture_default_str();
    cmd->add_flag("--first-position", o_.first_position,
                  "the first chunk's record computed right after the prompt's prefix (what "
                  "`ragkv serve --first-position-records` serves), the others alone");
    cmd->add_option("--neighbours", o_.neighbours,
                    "musique: also neighbour-aware records after each chunk's k nearest "
                    "passages, per k (e.g. 1,2; docs/kv_format.md)")
        ->delimiter(',');
    cmd->add_option("--oracle", o_.oracle,
                    "instead: upper bounds of row selection by rankers that know full prefill "
                    "(blender,replay,future-dev,future-attended,effect,greedy), server-side "
                    "ones replayed (attended-deviation,attended-linear) and adaptive stop "
                    "rules (mass@M,abs@T,res@E); bench/blend/bench_oracle.h")
        ->delimiter(',');
    cmd->add_option("--oracle-budgets", o_.oracle_budgets,
                    "mean r of the oracle's best per-prompt ratio choice")
        ->delimiter(',')->capture_default_str();
    cmd->add_option("--csv", o_.csv_path, "write per-strategy CSV");
    cmd->add_option("--png", o_.png_path, "plot quality vs r (gnuplot)");
  }
  int Run() override {
    blend::QualityBenchOptions o = o_;
    if (o.task == "xchunk") {
      if (o.model_path.empty()) o.model_path = blend::XchunkModelPath();
      if (o.chunks == 0) o.chunks = 4;
    } else if (o.model_path.empty()) {
      std::fprintf(stderr, "ragkv bench quality: --model is required for --task %s\n",
                   o.task.c_str());
      return 2;
    }
    if (o.chunks == 0) o.chunks = 6;
    if (!ApplySplit(&o)) return 2;
    if (!blend::ParseSelector(selector_, &o.blend.selector)) {
      std::fprintf(stderr, "ragkv bench quality: unknown --selector '%s'\n", selector_.c_str());
      return 2;
    }
    if (!ParseKvDtype(kv_, &o.kv_dtype)) {
      std::fprintf(stderr, "ragkv bench quality: --kv-dtype must be f32, f16 or bf16\n");
      return 2;
    }
    if (!o.oracle.empty()) {  // the oracle lines instead of the bench's own
      const absl::Status s = blend::RunOracleBench(o, std::cout);
      return s.ok() ? 0 : Fail("quality", s);
    }
    auto r = blend::RunQualityBench(o, std::cout);
    if (!r.ok()) return Fail("quality", r.status());
    return 0;
  }

 private:
  // ApplySplit: --split for either task, by seed (blend/xchunk_task.h: odd
  // seeds dev, even seeds test; the story task's prompts are sampled from
  // the model by the same seed, so the same rule splits them): picks the
  // split's first seed when --seed is not given, refuses a --seed of the
  // other split.
  bool ApplySplit(blend::QualityBenchOptions* o) const {
    auto split = retrieval::ParseQaSplit(split_, "--split");
    if (!split.ok()) {
      std::fprintf(stderr, "ragkv bench quality: %s\n", std::string(split.status().message()).c_str());
      return false;
    }
    if (o->task == "musique") {  // the questions are split, not the seed
      o->corpus_split = split_;
      return true;
    }
    if (*split == retrieval::QaSplit::kAll) return true;
    const bool dev = *split == retrieval::QaSplit::kDev;
    const bool xchunk = o->task == "xchunk";
    if (seed_->count() == 0) o->seed = xchunk ? (dev ? 1 : 2) : (dev ? 7919 : 7920);
    if (blend::XchunkSeedIsDev(o->seed) != dev) {
      std::fprintf(stderr, "ragkv bench quality: --seed %llu is a %s seed (odd seeds are dev, even "
                   "seeds test), not --split %s\n", static_cast<unsigned long long>(o->seed),
                   dev ? "test" : "dev", split_.c_str());
      return false;
    }
    return true;
  }

  CLI::Option* seed_ = nullptr;
  std::string split_ = "all";
  blend::QualityBenchOptions o_ = [] {
    blend::QualityBenchOptions o;
    o.chunks = 0;  // per task
    return o;
  }();
  std::string kv_ = "f32";
  std::string selector_ = blend::SelectorName(blend::BlendOptions{}.selector);
};

}  // namespace

std::unique_ptr<Command> NewBenchPrefillCommand() { return std::make_unique<BenchPrefillCommand>(); }
std::unique_ptr<Command> NewBenchKvstoreCommand() { return std::make_unique<BenchKvstoreCommand>(); }
std::unique_ptr<Command> NewBenchBlendCommand() { return std::make_unique<BenchBlendCommand>(); }
std::unique_ptr<Command> NewBenchQualityCommand() { return std::make_unique<BenchQualityCommand>(); }

}  // namespace ragkv::cli
