// oracle_blend.h: CacheBlend's row selection replayed outside the Blender
// with any ranking, and a swap model of "row j's K/V are exact" (bench
// only: `ragkv bench oracle`, upper bounds of row selection; docs/
// benchmarks.md "Selection upper bound").
//
// ReplayBlend repeats blend/blender.cc's algorithm with its defaults
// (reuse_exact_kv aside, which only moves float rounding): every selectable
// row through layer 0; at each check layer of `schedule` the still-selected
// selectable rows are probed (Model::ProjectKV), ranked by the caller's
// ranker, the top llround(ratio * selectable) kept, and the probe's K/V of
// every candidate written into the cache (scatter_probe_kv); then the kept
// rows and the query rows run the layer.
//
// Thread safety: pure functions; SwapModel is not thread-safe.
#ifndef RAGKV_BENCH_BLEND_ORACLE_BLEND_H_
#define RAGKV_BENCH_BLEND_ORACLE_BLEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "blend/blender.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace ragkv::blend {

// CachePlane: layer l's K (key) or V plane of `c` ([kv_heads][capacity][hd]).
const float* CachePlane(const model::KVCache& c, int l, bool key);

// AddAttentionMass: adds to (*mass)[j], j < qb, the softmax probability of
// key j under each query row and head of q ([nq, q_dim], layer l's
// projection), over the keys [0, qb) of layer l's plane of `c`.
void AddAttentionMass(const model::ModelConfig& cfg, const float* q, int64_t nq,
                      const model::KVCache& c, int l, int64_t qb, std::vector<double>* mass);

// OracleLayout: one prompt as the Blender laid it out: rows [0, first_selectable)
// are exact (the cached prefix), [first_selectable, query_begin) selectable,
// [query_begin, tokens.size()) the query (always recomputed).
struct OracleLayout {
  std::vector<int32_t> tokens;
  int64_t first_selectable = 1;
  int64_t query_begin = 0;
  int64_t total() const { return static_cast<int64_t>(tokens.size()); }
  int64_t selectable() const { return query_begin - first_selectable; }
};

// CheckState: what a ranker sees at a check layer.
struct CheckState {
  int layer = 0;
  absl::Span<const int32_t> cand_pos;  // sorted positions of the candidates
  const float* fresh_k = nullptr;      // the probe: f32 [kv_heads, candidates, head_dim]
  const float* fresh_v = nullptr;
  const model::KVCache* cache = nullptr;  // the fused cache before the probe's scatter
  const float* query_hidden = nullptr;    // the query rows' layer input, f32 [nq, dim]
  absl::Span<const int32_t> query_pos;
};

// Ranker: writes one score per candidate (higher: kept first; ties to the
// lower position, as kernels::TopK).
using Ranker = std::function<absl::Status(const CheckState& state, float* score)>;

// RatioChooser: at the first check layer, the request's final ratio (the
// adaptive ratio: every check layer's ratio is then scaled by it over the
// schedule's last ratio); `score` is the ranker's.
using RatioChooser = std::function<double(const CheckState& state, const float* score)>;

// CopyCache: a fresh cache of `src`'s layout holding its first `tokens` rows.
absl::StatusOr<model::KVCache> CopyCache(const model::ModelConfig& cfg, const model::KVCache& src,
                                         int64_t tokens);

// ReplayBlend: the algorithm above over `cached` (a full-reuse blend's fused
// cache: the loaded, re-rotated K/V of every context row; capacity >=
// layout.total()); the logits of every query row, f32 [query rows, vocab].
// With `choose`, its ratio (written to *applied_ratio when given) scales the
// schedule from the first check layer on, as BlendOptions::adaptive_mass.
absl::StatusOr<std::vector<float>> ReplayBlend(const model::Model& m, const OracleLayout& lay,
                                               const model::KVCache& cached,
                                               const std::vector<CheckLayer>& schedule,
                                               const Ranker& rank,
                                               const RatioChooser& choose = nullptr,
                                               double* applied_ratio = nullptr);

// SwapModel: the query rows' logits when the context K/V are the cached ones
// except that layers [0, exact_layers) are exact for every row (what the
// first check layer's probe gives) and chosen rows are exact at chosen
// layers; compared with full prefill's logits by KL.
class SwapModel {
 public:
  // Create: truth = full prefill's cache, cached = full reuse's (each with
  // capacity >= layout.total()), ref = full prefill's query logits.
  static absl::StatusOr<std::unique_ptr<SwapModel>> Create(const model::Model& m,
                                                           const OracleLayout& lay,
                                                           const model::KVCache& truth,
                                                           const model::KVCache& cached,
                                                           int exact_layers,
                                                           std::vector<float> ref);
  // Kl: mean KL(ref || x) over the query rows with `rows` exact at layers
  // [from_layer, n_layers) (from_layer >= exact_layers).
  absl::StatusOr<double> Kl(absl::Span<const int32_t> rows, int from_layer);
  // QueryMass: [layer][position < query_begin]: the attention mass full
  // prefill's query rows put on each context row, summed over rows and heads.
  const std::vector<std::vector<double>>& QueryMass() const { return mass_; }
  // Deviation: [layer][position]: ||K_t - K_c||^2 / its mean over the
  // selectable rows + the same of V (0 outside the selectable rows).
  const std::vector<std::vector<double>>& Deviation() const { return dev_; }
  // AheadMass: as QueryMass, but the query rows run over the cached rows
  // (exact below exact_layers): a look-ahead a server could compute.
  const std::vector<std::vector<double>>& AheadMass() const { return ahead_; }

 private:
  SwapModel(const model::Model& m, const OracleLayout& lay, const model::KVCache& truth,
            model::KVCache work, int exact_layers, std::vector<float> ref);
  absl::Status Init();
  // QueryPass: the query rows from their embeddings through every layer
  // over `over`'s context rows: their attention mass per layer, and their
  // layer input at exact_layers (when hidden_at_exact is given).
  absl::Status QueryPass(const model::KVCache& over, std::vector<std::vector<double>>* mass,
                         std::vector<float>* hidden_at_exact);
  void CopyRow(const model::KVCache& from, int l, int32_t pos);

  const model::Model& m_;
  const OracleLayout lay_;
  const model::KVCache& truth_;
  model::KVCache work_;  // truth below exact_layers, cached above
  std::unique_ptr<model::KVCache> cached_copy_;
  int exact_layers_;
  std::vector<float> ref_;
  std::vector<int32_t> qpos_;
  std::vector<float> hq_;  // the query rows' hidden at exact_layers' input
  std::vector<std::vector<double>> mass_, dev_, ahead_;
  model::Workspace ws_;
};

}  // namespace ragkv::blend

#endif  // RAGKV_BENCH_BLEND_ORACLE_BLEND_H_
