#include "model/internal/rope_scaling.h"

#include <algorithm>
#include <cmath>

namespace ragkv::model::internal {

std::vector<float> Llama3RopeFactors(double theta, int head_dim, double factor, double low,
                                     double high, double original) {
  std::vector<float> out(head_dim / 2);
  const double low_wavelen = original / low, high_wavelen = original / high;
  for (int j = 0; j < head_dim / 2; ++j) {
    const double freq = std::pow(theta, -2.0 * j / head_dim);
    const double wavelen = 2 * M_PI / freq;
    double div = 1.0;
    if (wavelen > low_wavelen) {
      div = factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (original / wavelen - low) / (high - low);
      div = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out[j] = static_cast<float>(div);
  }
  return out;
}

namespace {

// CorrDim: the dim whose pair turns `rotations` times over `original`
// positions (YaRN's correction dim, fractional).
double CorrDim(double theta, int head_dim, double original, double rotations) {
  return head_dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(theta));
}

}  // namespace

std::vector<float> YarnRopeFactors(double theta, int head_dim, const YarnParams& p) {
  const double low = std::max(0.0, std::floor(CorrDim(theta, head_dim, p.original, p.beta_fast)));
  const double high =
      std::min(head_dim - 1.0, std::ceil(CorrDim(theta, head_dim, p.original, p.beta_slow)));
  const double s = 1.0 / p.factor;
  std::vector<float> out(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j) {
    const double y = (j - low) / std::max(0.001, high - low);
    const double ramp = 1.0 - std::clamp(y, 0.0, 1.0);  // 1: extrapolate, 0: interpolate
    out[j] = static_cast<float>(1.0 / (s * (1 - ramp) + ramp));
  }
  return out;
}

double YarnMscale(double factor) { return factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0; }

}  // namespace ragkv::model::internal
