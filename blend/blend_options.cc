// blend_options.cc: the free functions of BlendOptions' vocabulary (names
// of strategies and selectors, the check-layer schedule).
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "blend/blender.h"

namespace ragkv::blend {

const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kCacheBlend: return "cacheblend";
    case Strategy::kFullPrefill: return "full-prefill";
    case Strategy::kFullReuse: return "full-reuse";
    case Strategy::kPrefixReuse: return "prefix-reuse";
  }
  return "?";
}

const char* SelectorName(Selector s) {
  switch (s) {
    case Selector::kDeviation: return "deviation";
    case Selector::kChunkHead: return "chunk-head";
    case Selector::kQueryAttention: return "query-attention";
    case Selector::kDeviationAttention: return "deviation+attention";
    case Selector::kAttendedDeviation: return "attended-deviation";
    case Selector::kLookaheadDeviation: return "lookahead-deviation";
  }
  return "?";
}

bool ParseSelector(const std::string& name, Selector* out) {
  for (Selector s : {Selector::kDeviation, Selector::kChunkHead, Selector::kQueryAttention,
                     Selector::kDeviationAttention, Selector::kAttendedDeviation,
                     Selector::kLookaheadDeviation}) {
    if (name == SelectorName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

namespace {

std::vector<CheckLayer> Schedule(const BlendOptions& options, int n_layers, int first) {
  std::vector<CheckLayer> out;
  const double r = std::clamp(options.ratio, 0.0, 1.0);
  if (r <= 0) return out;
  if (options.filtering == Filtering::kSingleCheck || options.gradual_steps <= 1) {
    if (first < n_layers) out.push_back({first, r});
    return out;
  }
  const int steps = options.gradual_steps;
  const double r1 = std::min(1.0, std::max(r, r * options.gradual_first_factor));
  for (int i = 0; i < steps; ++i) {
    const int layer = first + i;
    if (layer >= n_layers) break;
    // Geometric interpolation r1 -> r over the steps.
    const double t = static_cast<double>(i) / (steps - 1);
    out.push_back({layer, r1 * std::pow(r / r1, t)});
  }
  if (!out.empty()) out.back().ratio = r;
  return out;
}

}  // namespace

std::vector<CheckLayer> MakeSchedule(const BlendOptions& options, int n_layers) {
  return Schedule(options, n_layers, options.first_check_layer >= 0 ? options.first_check_layer : 1);
}

std::vector<CheckLayer> MakeSchedule(const BlendOptions& options, int n_layers,
                                     const std::function<bool(int)>& sliding) {
  if (options.first_check_layer >= 0) return MakeSchedule(options, n_layers);
  // The first layer >= 1 that attends globally: on a sliding-window layer
  // the query's attention cannot reach far rows, and before the first
  // global layer a row's deviation is 0 while its window lies inside its
  // chunk. No global layer (or no sliding one): layer 1.
  int first = 1;
  for (int l = 1; l < n_layers; ++l) {
    if (!sliding(l)) {
      first = l;
      break;
    }
  }
  return Schedule(options, n_layers, first);
}

std::vector<CheckLayer> MakeSchedule(const BlendOptions& options, const model::ModelConfig& cfg) {
  return MakeSchedule(options, cfg.n_layers, [&](int l) { return cfg.IsSwaLayer(l); });
}

double RowsKept(double ratio, double selectable, double left) {
  return std::min(left, std::round(ratio * selectable));
}

std::vector<LayerRows> RowsByLayer(const std::vector<CheckLayer>& schedule, int n_layers,
                                   double selectable, bool recompute) {
  std::vector<LayerRows> out(std::max(0, n_layers));
  double sel = recompute ? selectable : 0;
  size_t next = 0;
  for (int l = 0; l < n_layers; ++l) {
    if (next < schedule.size() && schedule[next].layer == l) {
      const double want = RowsKept(schedule[next++].ratio, selectable, sel);
      if (want < sel) {
        out[l].probed = sel;
        sel = want;
      }
    }
    out[l].selected = sel;
  }
  return out;
}

}  // namespace ragkv::blend
