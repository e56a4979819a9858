// lookahead.h: the query's look-ahead for the `lookahead-deviation`
// selector (docs/blend.md "Recompute selectors"). At the first check layer
// the query rows are run on through the later layers (all of them, or a
// horizon of them: docs/blend.md "The look-ahead's horizon") over the
// fused cache as it stands (fresh rows below the check, the reused rows
// from it on), and their attention on every candidate row is recorded per
// layer. A check layer then weighs a row's deviation by the attention the
// query will put on it in the layers after the check, where the single
// check layer's own attention sees only the start of the network.
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

// LookaheadTarget: the last layer a check at `check_layer` reads ahead to
// with a horizon of `horizon` layers (<= 0: every layer) in a model of
// `layers` layers; never past the last layer, whatever the horizon. The
// Blender's look-ahead and the cost model's prediction of it both use it.
inline int LookaheadTarget(int check_layer, int horizon, int layers) {
  const int last = layers - 1;
  const bool all = horizon <= 0 || horizon >= last - check_layer;  // no overflow
  return all ? last : check_layer + horizon;
}

// QueryLookahead: mass[l][p], the attention mass the query rows put on
// context position p at layer l, summed over the rows and heads, for the
// layers after the one it ran from that it has reached (others stay zero).
// With a horizon it goes only so far at the first check and Advance takes
// it further at later ones, so a check waits only for the layers it looks
// at (docs/blend.md "The look-ahead's horizon").
class QueryLookahead {
 public:
  // Run: the query rows (`hidden`, f32 [rows, dim], their input to layer
  // `from`; `positions` ascending, all >= n_context) through layers
  // from..min(L-1, from + horizon) (horizon <= 0: every layer) over `cache`
  // (its first `n_total` rows), recording the mass on `cand_pos` (<
  // n_context) at every layer after `from` that it reaches. Reaching layer
  // l forwards the rows through layer l - 1, which writes their fresh K/V
  // into the cache there: the caller must not have finished those layers
  // (the blend recomputes the query rows at every layer and overwrites
  // them; a check at a layer past reached() runs a new look-ahead from it).
  // `wait_layer(l)` returns once layer l's rows are in the cache. The
  // model, cache and wait_layer must outlive later Advance calls.
  absl::Status Run(const model::Model& m, int from, std::vector<float> hidden,
                   absl::Span<const int32_t> positions, model::KVCache& cache, int64_t n_total,
                   int64_t n_context, absl::Span<const int32_t> cand_pos,
                   kernels::CausalMode causal, std::function<absl::Status(int)> wait_layer,
                   model::Workspace* ws, int horizon = 0);

  // Advance: on through layer min(L-1, to) over the cache as it stands now
  // (nothing when already there or not ran()). LookFrom: Advance to what a
  // check at `layer` looks at: layer + horizon (every layer without one).
  absl::Status Advance(int to, model::Workspace* ws);
  absl::Status LookFrom(int layer, model::Workspace* ws);

  // ran: Run has recorded the mass (it had query rows). Reached: the last
  // layer whose mass is recorded.
  bool ran() const { return !mass_.empty(); }
  int reached() const { return reached_; }

  // Weigh: dev[i] *= the mass on cand_pos[i] summed over the layers after
  // `layer` reached so far; at the last layer, or when none after it is
  // reached, dev[i] *= att[i], the check layer's own attention (att empty:
  // the mass, 0 where none is reached).
  void Weigh(int layer, const std::vector<float>& att, absl::Span<const int32_t> cand_pos,
             float* dev) const;

  // After: score[i] = the mass on cand_pos[i] summed over the layers after
  // `layer` (0 when there are none).
  void After(int layer, absl::Span<const int32_t> cand_pos, float* score) const;

 private:
  // Step: the query rows' forward through layer l - 1, then their scores at
  // layer l (l > from).
  absl::Status Step(int l, model::Workspace* ws);

  std::vector<std::vector<float>> mass_;  // [layer][position < n_context]
  int reached_ = -1, horizon_ = 0;
  const model::Model* m_ = nullptr;
  model::KVCache* cache_ = nullptr;
  std::vector<float> hidden_;
  std::vector<int32_t> positions_, cand_pos_;
  std::vector<float> q_, att_;  // Step's query projection and scores
  int64_t n_total_ = 0, n_context_ = 0;
  kernels::CausalMode causal_ = kernels::CausalMode::kExact;
  std::function<absl::Status(int)> wait_layer_;
};

}  // namespace ragkv::blend::internal

#endif  // RAGKV_BLEND_INTERNAL_LOOKAHEAD_H_
