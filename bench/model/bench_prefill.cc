#include "bench/model/bench_prefill.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "model/loader.h"

namespace ragkv::model {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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
    const double t0 = Now();
    RETURN_IF_ERROR(kernels::Gemm(view(a), view(b), /*trans_b=*/true, view(c)));
    const double t = Now() - t0;
    if (r > 0) best = std::min(best, t);  // first run warms up
  }
  return 2.0 * n * double(n) * n / best / 1e9;
}

}  // namespace

absl::StatusOr<PrefillBenchResult> RunPrefillBench(const PrefillBenchOptions& o) {
  if (o.tokens.empty()) return absl::InvalidArgumentError("bench prefill: no token counts");
  if (o.threads > 0) kernels::SetMaxThreads(o.threads);
  const int max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  if (*std::min_element(o.tokens.begin(), o.tokens.end()) <= 0) {
    return absl::InvalidArgumentError("bench prefill: token counts must be > 0");
  }
  LoadOptions lo;
  ASSIGN_OR_RETURN(ModelParts parts, LoadModelParts(o.model, lo));
  if (parts.config.max_seq_len < max_t) parts.config.max_seq_len = max_t;
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                   Model::Create(std::move(parts.config), std::move(parts.weights)));
  const ModelConfig& c = model->config();
  PrefillBenchResult res;
  res.model = c.DebugString();
  res.fingerprint = model->fingerprint_hex();
  res.threads = kernels::MaxThreads();
  const int reps = std::max(1, o.repeats);
  ASSIGN_OR_RETURN(double ceil0, SgemmGflops(o.sgemm_n, 3));

  std::vector<int32_t> tokens(max_t);
  uint64_t s = 12345;
  for (auto& t : tokens) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((s >> 33) % uint64_t(c.vocab_size));
  }
  Workspace ws;
  std::vector<float> logits(c.vocab_size);
  for (int T : o.tokens) {
    ASSIGN_OR_RETURN(KVCache cache, model->NewCache(T));
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {
      RETURN_IF_ERROR(cache.set_num_tokens(0));
      const double t0 = Now();
      RETURN_IF_ERROR(model->Prefill(absl::MakeConstSpan(tokens).subspan(0, T), &cache, &ws,
                                     LogitsMode::kLast, logits.data()));
      if (r > 0) times.push_back(Now() - t0);  // first run warms up (page faults, workspace)
    }
    std::sort(times.begin(), times.end());
    PrefillBenchRow row;
    row.tokens = T;
    row.best_s = times.front();
    row.median_s = times[times.size() / 2];
    row.tokens_per_s = T / row.best_s;
    row.model_gflop =
        (model->MatmulFlops(T) + model->AttentionFlops(T) + 2.0 * c.dim * c.vocab_size) / 1e9;
    row.achieved_gflops = row.model_gflop / row.best_s;
    res.rows.push_back(row);
  }
  ASSIGN_OR_RETURN(double ceil1, SgemmGflops(o.sgemm_n, 3));
  res.sgemm_gflops = std::max(ceil0, ceil1);
  for (auto& row : res.rows) {
    row.bound_s = row.model_gflop / res.sgemm_gflops;
    row.fraction = row.bound_s / row.best_s;
  }
  return res;
}

void PrintPrefillBench(const PrefillBenchResult& r, std::ostream& out) {
  out << absl::StrFormat("model: %s\nfingerprint: %s\nthreads: %d\nsgemm ceiling: %.1f GFLOP/s\n",
                         r.model, r.fingerprint, r.threads, r.sgemm_gflops);
  out << absl::StrFormat("%8s %10s %10s %12s %10s %10s %10s %9s\n", "tokens", "best_ms",
                         "median_ms", "tokens/s", "GFLOP", "GFLOP/s", "bound_ms", "fraction");
  for (const auto& x : r.rows) {
    out << absl::StrFormat("%8d %10.1f %10.1f %12.0f %10.2f %10.1f %10.1f %8.0f%%\n", x.tokens,
                           x.best_s * 1e3, x.median_s * 1e3, x.tokens_per_s, x.model_gflop,
                           x.achieved_gflops, x.bound_s * 1e3, x.fraction * 100);
  }
}

}  // namespace ragkv::model
