// lookahead.h: the query's look-ahead for the `lookahead-deviation`
// selector (docs/blend.md "Recompute selectors"). At the first check layer
// the query rows are run on through the remaining layers over the fused
// cache as it stands (fresh rows below the check, the reused rows from it
// on), and their attention on every candidate row is recorded per layer.
// A check layer then weighs a row's deviation by the attention the query
// will put on it in the layers after the check, where the single check
// layer's own attention sees only the start of the network.
#ifndef RAGKV_BLEND_INTERNAL_LOOKAHEAD_H_
#define RAGKV_BLEND_INTERNAL_LOOKAHEAD_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace ragkv::blend::internal {

// QueryLookahead: mass[l][p], the attention mass the query rows put on
// context position p at layer l, summed over the rows and heads, for the
// layers after the one it ran from (earlier layers stay zero).
class QueryLookahead {
 public:
  // Run: the query rows (`hidden`, f32 [rows, dim], their input to layer
  // `from`; `positions` ascending, all >= n_context) through layers
  // from..L-1 over `cache` (its first `n_total` rows), recording the mass
  // on `cand_pos` (< n_context) at every layer after `from`. The rows'
  // fresh K/V are written into the cache at their positions (the blend
  // recomputes those rows at every layer, so they are overwritten).
  // `wait_layer(l)` returns once layer l's rows are in the cache.
  absl::Status Run(const model::Model& m, int from, std::vector<float> hidden,
                   absl::Span<const int32_t> positions, model::KVCache& cache, int64_t n_total,
                   int64_t n_context, absl::Span<const int32_t> cand_pos,
                   kernels::CausalMode causal, const std::function<absl::Status(int)>& wait_layer,
                   model::Workspace* ws);

  // ran: Run has recorded the mass (it had query rows).
  bool ran() const { return !mass_.empty(); }

  // Weigh: dev[i] *= the mass on cand_pos[i] summed over the layers after
  // `layer`; at the last layer (none after) dev[i] *= att[i], the check
  // layer's own attention.
  void Weigh(int layer, const std::vector<float>& att, absl::Span<const int32_t> cand_pos,
             float* dev) const;

  // After: score[i] = the mass on cand_pos[i] summed over the layers after
  // `layer` (0 when there are none).
  void After(int layer, absl::Span<const int32_t> cand_pos, float* score) const;

 private:
  std::vector<std::vector<float>> mass_;  // [layer][position < n_context]
};

}  // namespace ragkv::blend::internal

#endif  // RAGKV_BLEND_INTERNAL_LOOKAHEAD_H_
