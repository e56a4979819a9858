// loading_controller.h: LoadingController, CacheBlend §5's loading
// controller on top of the shared CostModel (blend/cost_model.h).
//
// It (1) calibrates a CostModel of this machine: the model's shape, the
// measured f32 throughput of a selective layer recompute (timed once at
// Create with Model::ForwardLayer, or injected), and the per-tier KV loading
// bandwidth (injected, or measured from TierStats / past blends); (2) decides
// the recompute ratio r >= r_min so that recompute hides under loading, and
// the cheapest tier whose loading still hides under recompute
// (ChooseRatioAndTier), exposing the decision and why; (3) runs the blend
// with that ratio, loading layer l+1 on a second thread while layer l is
// recomputed (bounded: prefetch_layers ahead; a StoreKvSource additionally
// bounds the pinned layers it buffers), and feeds the measured per-layer
// times back into its calibration.
//
// Thread safety: Decide/Blend/CostModelSnapshot may be called concurrently;
// calibration updates are serialized by an internal mutex.
#ifndef RAGKV_BLEND_LOADING_CONTROLLER_H_
#define RAGKV_BLEND_LOADING_CONTROLLER_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/sync.h"
#include "absl/types/span.h"
#include "blend/blender.h"
#include "blend/cost_model.h"
#include "model/model.h"

namespace ragkv::blend {

struct ControllerOptions {
  const model::Model* model = nullptr;  // required, not owned
  double r_min = 0.15;  // quality floor
  double r_max = 0.50;  // never recompute more than this
  // Effective FLOP/s of a selective recompute on this machine. 0: measured
  // at Create by timing ForwardLayer (`calibration_rows` rows against a KV
  // of `calibration_kv_tokens`, best of `calibration_runs`).
  double recompute_flops_per_s = 0;
  int calibration_rows = 64;
  int calibration_kv_tokens = 512;
  int calibration_runs = 3;
  // KV loading bandwidth of each tier in bytes/s, indexed by blend::Tier
  // (ram, ssd, remote). 0: unknown (the tier is then not chosen unless it is
  // the only one; set it via ObserveTierBandwidth).
  double tier_bytes_per_s[3] = {0, 0, 0};
  // Fixed cost per layer (dispatch, barriers), seconds.
  double layer_overhead_s = 0;
  // Weight of a new observation in the running calibration (EWMA).
  double ewma_alpha = 0.3;
  // Template for the blends it runs (strategy kCacheBlend; ratio, overlap
  // and prefetch are set by the controller).
  BlendOptions blend;
  int prefetch_layers = 2;
};

// ControlledBlend: the decision and the blend it produced.
struct ControlledBlend {
  Decision decision;
  BlendResult result;
};

class LoadingController {
 public:
  // Create: InvalidArgument without a model or with r_min > r_max or ratios
  // outside [0, 1]; errors of the calibration run.
  static absl::StatusOr<std::unique_ptr<LoadingController>> Create(const ControllerOptions& options);

  // Decide: the ratio and tier for a request of `context_tokens` cached
  // tokens and `query_tokens` new ones, among the tiers in `available`
  // (ChooseRatioAndTier over the calibrated cost model). decision.why says
  // which rule fired and with which per-layer times.
  Decision Decide(int64_t context_tokens, int64_t query_tokens,
                  const std::vector<Tier>& available) const;

  // Blend: Decide (context = every non-query segment) then run the blend with
  // the decided ratio and overlapped loading. The sources must already read
  // from the decided tier (the decision also tells the caller where the
  // chunks are worth keeping). Updates the calibration from the run.
  // `on_layer_done`, `cache_pool`: as in BlendOptions (null: none).
  absl::StatusOr<ControlledBlend> Blend(
      absl::Span<const BlendSegment> segments, const std::vector<Tier>& available,
      std::function<absl::Status(int, const model::KVCache&, absl::Span<const int32_t>)>
          on_layer_done = nullptr,
      model::KVCachePool* cache_pool = nullptr);

  // ObserveTierBandwidth: folds a measured loading bandwidth into the
  // calibration (e.g. from kvstore TierStats::ReadGBps() * 1e9).
  void ObserveTierBandwidth(Tier tier, double bytes_per_s);
  // ObserveBlend: folds a blend's measured per-layer recompute time into the
  // effective FLOP/s (layers after the last check layer).
  void ObserveBlend(const BlendResult& result);

  // CostModelSnapshot: the calibrated model now.
  CostModel CostModelSnapshot() const;
  double recompute_flops_per_s() const;
  double tier_bytes_per_s(Tier tier) const;

 private:
  LoadingController(const ControllerOptions& options, ModelShape shape,
                    std::unique_ptr<Blender> blender)
      : options_(options), shape_(std::move(shape)), blender_(std::move(blender)) {}

  const ControllerOptions options_;
  const ModelShape shape_;
  const std::unique_ptr<Blender> blender_;
  mutable Mutex mu_;
  double flops_per_s_ ABSL_GUARDED_BY(mu_) = 0;
  double tier_bw_[3] ABSL_GUARDED_BY(mu_) = {0, 0, 0};
};

// ShapeOf: the cost-model shape of a ragkv model (f32 weights; KV bytes of
// its kv_dtype).
ModelShape ShapeOf(const model::Model& model);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_LOADING_CONTROLLER_H_
