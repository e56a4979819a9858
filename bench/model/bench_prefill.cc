#include "bench/model/bench_prefill.h"

#include <unistd.h>

#include <filesystem>

#include "base/clock.h"
#include "bench/model/llamacpp_runner.h"
#include "bench/model/synthetic_gguf.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "model/loader.h"

namespace ragkv::model {
namespace {

// SgemmGflops: best GFLOP/s of an n x n x n kernels::Gemm over `reps` runs.
absl::StatusOr<double> SgemmGflops(int n, int reps) {
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float((i * 7) % 13) * 0.01f;
    b[i] = float((i * 5) % 11) * 0.01f;
  }
  auto view = [n](std::vector<float>& v) {
    return kernels::TensorView::Contiguous(v.data(), kernels::DType::kF32, {n, n});
  };
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {
    const Clock::time_point t0 = Clock::now();
    RETURN_IF_ERROR(kernels::Gemm(view(a), view(b), /*trans_b=*/true, view(c)));
    const double t = SecondsSince(t0);
    if (r > 0) best = std::min(best, t);  // first run warms up
  }
  return 2.0 * n * double(n) * n / best / 1e9;
}

}  // namespace

namespace {

std::vector<int32_t> PromptTokens(int n, int vocab) {
  std::vector<int32_t> tokens(n);
  uint64_t s = 12345;
  for (auto& t : tokens) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((s >> 33) % uint64_t(vocab));
  }
  return tokens;
}

// Bench: one run's state: the model, its prompt, and (with compare) the
// llama.cpp runner on the same file.
struct Bench {
  std::unique_ptr<Model> model;
  std::vector<int32_t> tokens;
  Workspace ws;
  std::vector<float> logits;
  std::unique_ptr<LlamaCppRunner> llama;

  absl::StatusOr<double> Ragkv(KVCache* cache, int T) {
    RETURN_IF_ERROR(cache->set_num_tokens(0));
    const Clock::time_point t0 = Clock::now();
    RETURN_IF_ERROR(model->Prefill(absl::MakeConstSpan(tokens).subspan(0, T), cache, &ws,
                                   LogitsMode::kLast, logits.data()));
    return SecondsSince(t0);
  }
  absl::StatusOr<double> Llama(int T) {
    return llama->Prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + T));
  }
};

// MeasureLength: the row of prompt length T, ragkv and llama.cpp runs
// interleaved (the first of each is a warm-up).
absl::StatusOr<PrefillBenchRow> MeasureLength(Bench& b, int T, int reps) {
  const ModelConfig& c = b.model->config();
  ASSIGN_OR_RETURN(KVCache cache, b.model->NewCache(T));
  std::vector<double> ours, theirs;
  for (int r = 0; r < reps + 1; ++r) {
    ASSIGN_OR_RETURN(double t, b.Ragkv(&cache, T));
    if (r > 0) ours.push_back(t);  // first run warms up (page faults, workspace)
    if (b.llama == nullptr) continue;
    ASSIGN_OR_RETURN(double u, b.Llama(T));
    if (r > 0) theirs.push_back(u);
  }
  std::sort(ours.begin(), ours.end());
  PrefillBenchRow row;
  row.tokens = T;
  row.best_s = ours.front();
  row.median_s = ours[ours.size() / 2];
  row.tokens_per_s = T / row.best_s;
  row.model_gflop =
      (b.model->MatmulFlops(T) + b.model->AttentionFlops(T) + 2.0 * c.dim * c.vocab_size) / 1e9;
  row.achieved_gflops = row.model_gflop / row.best_s;
  if (!theirs.empty()) {
    std::sort(theirs.begin(), theirs.end());
    row.llamacpp_best_s = theirs.front();
    row.llamacpp_median_s = theirs[theirs.size() / 2];
    row.llamacpp_tokens_per_s = T / row.llamacpp_best_s;
    row.ratio = row.tokens_per_s / row.llamacpp_tokens_per_s;
  }
  return row;
}

// RagkvDecodeRate: tokens/s of 16 DecodeSteps after a T-token prefill.
absl::StatusOr<double> RagkvDecodeRate(Bench& b, int T) {
  ASSIGN_OR_RETURN(KVCache cache, b.model->NewCache(T + 17));
  RETURN_IF_ERROR(b.Ragkv(&cache, T).status());
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 16; ++i) {
    RETURN_IF_ERROR(b.model->DecodeStep(b.tokens[i], &cache, &b.ws, b.logits.data()));
  }
  return 16 / (SecondsSince(t0));
}

// MeasureDecode: the median over `reps` runs (after a warm-up of each) of
// ragkv's and llama.cpp's decode rates, runs interleaved.
absl::Status MeasureDecode(Bench& b, int T, int reps, PrefillBenchResult* res) {
  const std::vector<int32_t> prompt(b.tokens.begin(), b.tokens.begin() + T);
  std::vector<double> ours, theirs;
  for (int r = 0; r < reps + 1; ++r) {
    ASSIGN_OR_RETURN(double x, RagkvDecodeRate(b, T));
    ASSIGN_OR_RETURN(double y, b.llama->DecodeRate(prompt, 16));
    if (r == 0) continue;
    ours.push_back(x);
    theirs.push_back(y);
  }
  std::sort(ours.begin(), ours.end());
  std::sort(theirs.begin(), theirs.end());
  res->ragkv_decode_tokens_per_s = ours[ours.size() / 2];
  res->llamacpp_decode_tokens_per_s = theirs[theirs.size() / 2];
  res->decode_context = T;
  return absl::OkStatus();
}

}  // namespace

// RunPrefillOn: RunPrefillBench on a model file (a synthetic one already
// written to a GGUF under --compare).
absl::StatusOr<PrefillBenchResult> RunPrefillOn(const PrefillBenchOptions& o,
                                                const std::string& lib_dir, int max_t, int min_t);

absl::StatusOr<PrefillBenchResult> RunPrefillBench(const PrefillBenchOptions& o) {
  if (o.tokens.empty()) return absl::InvalidArgumentError("bench prefill: no token counts");
  if (!o.compare.empty() && o.compare != "llama.cpp") {
    return absl::InvalidArgumentError("bench prefill: --compare takes llama.cpp, got " + o.compare);
  }
  if (!o.llamacpp_cpu.empty() && o.compare.empty()) {
    return absl::InvalidArgumentError("bench prefill: --llamacpp-cpu needs --compare llama.cpp");
  }
  if (o.threads > 0) kernels::SetMaxThreads(o.threads);
  const int max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  const int min_t = *std::min_element(o.tokens.begin(), o.tokens.end());
  if (min_t <= 0) return absl::InvalidArgumentError("bench prefill: token counts must be > 0");
  PrefillBenchOptions opt = o;
  const std::string lib_dir = o.llamacpp_dir.empty() ? LlamaCppRunner::DefaultLibDir() : o.llamacpp_dir;
  std::string temp;  // the synthetic model's GGUF, removed at the end
  // A moe: or gemma3: spec exists only as a file; a synthetic: one is written for llama.cpp.
  if (IsRandomSpec(o.model) || (!o.compare.empty() && o.model.rfind("synthetic:", 0) == 0)) {
    temp = std::filesystem::temp_directory_path() /
           absl::StrFormat("ragkv-bench-prefill-%d.gguf", ::getpid());
    RETURN_IF_ERROR(WriteSyntheticGguf(o.model, o.encoding, lib_dir, temp));
    opt.model = temp;
  }
  absl::StatusOr<PrefillBenchResult> r = RunPrefillOn(opt, lib_dir, max_t, min_t);
  if (!temp.empty()) std::filesystem::remove(temp);
  return r;
}

absl::StatusOr<PrefillBenchResult> RunPrefillOn(const PrefillBenchOptions& o,
                                                const std::string& lib_dir, int max_t, int min_t) {
  const int64_t rss0 = ProcessRssBytes();
  ASSIGN_OR_RETURN(ModelParts parts, LoadModelParts(o.model, LoadOptions{}));
  if (!o.compare.empty() && parts.format != ModelFormat::kGguf) {
    return absl::InvalidArgumentError("bench prefill: --compare llama.cpp needs a GGUF --model");
  }
  if (parts.config.max_seq_len < max_t) parts.config.max_seq_len = max_t;
  Bench b;
  ASSIGN_OR_RETURN(b.model, Model::Create(std::move(parts.config), std::move(parts.weights)));
  const ModelConfig& c = b.model->config();
  b.tokens = PromptTokens(max_t, c.vocab_size);
  b.logits.resize(c.vocab_size);
  PrefillBenchResult res;
  res.model = c.DebugString();
  res.fingerprint = b.model->fingerprint_hex();
  res.threads = kernels::MaxThreads();
  const int reps = std::max(1, o.repeats);
  if (!o.compare.empty()) {
    {
      ASSIGN_OR_RETURN(KVCache warm, b.model->NewCache(max_t));
      RETURN_IF_ERROR(b.Ragkv(&warm, max_t).status());
      res.ragkv_rss_bytes = ProcessRssBytes() - rss0;
    }
    const int64_t rss1 = ProcessRssBytes();
    ASSIGN_OR_RETURN(
        b.llama, LlamaCppRunner::Open(lib_dir, o.model, max_t + 32, res.threads, o.llamacpp_cpu));
    res.llamacpp_cpu = o.llamacpp_cpu;
    RETURN_IF_ERROR(b.Llama(max_t).status());
    res.llamacpp_rss_bytes = ProcessRssBytes() - rss1;
    std::error_code ec;
    res.file_bytes = static_cast<int64_t>(std::filesystem::file_size(o.model, ec));
  }
  // After the RSS readings: its 3 n x n matrices are not the model's memory.
  ASSIGN_OR_RETURN(double ceil0, SgemmGflops(o.sgemm_n, 3));
  for (int T : o.tokens) {
    ASSIGN_OR_RETURN(PrefillBenchRow row, MeasureLength(b, T, reps));
    res.rows.push_back(row);
  }
  if (b.llama != nullptr) RETURN_IF_ERROR(MeasureDecode(b, min_t, reps, &res));
  ASSIGN_OR_RETURN(double ceil1, SgemmGflops(o.sgemm_n, 3));
  res.sgemm_gflops = std::max(ceil0, ceil1);
  for (auto& row : res.rows) {
    row.bound_s = row.model_gflop / res.sgemm_gflops;
    row.fraction = row.bound_s / row.best_s;
  }
  return res;
}

namespace {

// Int8PrefillName: what multiplies quantized weights by more than 8 rows here.
const char* Int8PrefillName() {
  if (kernels::AmxActive()) return "AMX tiles";
  if (kernels::VnniPanelsActive()) return "AVX-512 VNNI panels";
  if (kernels::BwPanelsActive()) return "AVX-512BW panels";
  if (kernels::Avx2PanelsActive()) return "AVX2 panels";
  return "dequantize + sgemm";
}

}  // namespace

void PrintPrefillBench(const PrefillBenchResult& r, std::ostream& out) {
  out << absl::StrFormat(
      "model: %s\nfingerprint: %s\nthreads: %d\nsgemm ceiling: %.1f GFLOP/s "
      "(OpenBLAS core %s)\nkernels: %s, quantized prefill rows on %s\n",
      r.model, r.fingerprint, r.threads, r.sgemm_gflops, kernels::BlasCoreName(),
      kernels::IsaName(kernels::ActiveIsa()), Int8PrefillName());
  out << absl::StrFormat("%8s %10s %10s %12s %10s %10s %10s %9s\n", "tokens", "best_ms",
                         "median_ms", "tokens/s", "GFLOP", "GFLOP/s", "bound_ms", "fraction");
  for (const auto& x : r.rows) {
    out << absl::StrFormat("%8d %10.1f %10.1f %12.0f %10.2f %10.1f %10.1f %8.0f%%\n", x.tokens,
                           x.best_s * 1e3, x.median_s * 1e3, x.tokens_per_s, x.model_gflop,
                           x.achieved_gflops, x.bound_s * 1e3, x.fraction * 100);
  }
  if (r.llamacpp_rss_bytes < 0) return;
  out << "compare llama.cpp (same file, prompt, threads; runs interleaved; CPU variant: "
      << (r.llamacpp_cpu.empty() ? "the best for this CPU" : r.llamacpp_cpu) << "):\n";
  out << absl::StrFormat("%8s %12s %12s %10s\n", "tokens", "ragkv tok/s", "llama tok/s", "ratio");
  for (const auto& x : r.rows) {
    out << absl::StrFormat("%8d %12.0f %12.0f %9.2fx\n", x.tokens, x.tokens_per_s,
                           x.llamacpp_tokens_per_s, x.ratio);
  }
  out << absl::StrFormat(
      "rss: ragkv %.1f MiB, llama.cpp %.1f MiB (file %.1f MiB; ragkv/llama.cpp %.2f)\n"
      "decode (16 steps after %d tokens, median of the runs): ragkv %.1f tok/s, llama.cpp %.1f tok/s\n",
      r.ragkv_rss_bytes / 1048576.0, r.llamacpp_rss_bytes / 1048576.0, r.file_bytes / 1048576.0,
      double(r.ragkv_rss_bytes) / std::max<int64_t>(1, r.llamacpp_rss_bytes),
      r.decode_context, r.ragkv_decode_tokens_per_s, r.llamacpp_decode_tokens_per_s);
}

}  // namespace ragkv::model
