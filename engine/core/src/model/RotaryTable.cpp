#include "trainscope/core/model/RotaryTable.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace ts::core {
namespace {

std::vector<double> plainInvFreq(double theta, int64_t dim) {
  std::vector<double> f(size_t(dim / 2));
  // transformers: arange(0, dim, 2) / dim as the exponent.
  for (int64_t i = 0; i < dim / 2; ++i) f[size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / dim);
  return f;
}

void llama3(std::vector<double>& f, const ModelConfig::RopeScaling& r, int64_t maxPositions) {
  const double old = r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                            : double(maxPositions);
  const double lowWave = old / r.low_freq_factor, highWave = old / r.high_freq_factor;
  for (double& x : f) {
    const double wave = 2 * std::numbers::pi / x;
    if (wave > lowWave) {
      x /= r.factor;
    } else if (!(wave < highWave)) {  // the band between: smoothly interpolated
      const double s = (old / wave - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      x = (1 - s) * x / r.factor + s * x;
    }
  }
}

double yarnMscale(double scale) {
  return scale <= 1 ? 1.0 : 0.1 * std::log(scale) + 1.0;
}

double yarn(std::vector<double>& f, double theta, const ModelConfig::RopeScaling& r, int64_t dim,
            int64_t maxPositions) {
  const double orig = r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                             : double(maxPositions);
  auto corrDim = [&](double rot) {
    return (dim * std::log(orig / (rot * 2 * std::numbers::pi))) / (2 * std::log(theta));
  };
  double low = std::max(std::floor(corrDim(r.beta_fast)), 0.0);
  double high = std::min(std::ceil(corrDim(r.beta_slow)), double(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < f.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extra = 1 - ramp;  // the extrapolated share
    f[i] = (f[i] / r.factor) * (1 - extra) + f[i] * extra;
  }
  return r.attention_factor > 0 ? r.attention_factor : yarnMscale(r.factor);
}

double longrope(std::vector<double>& f, const ModelConfig::RopeScaling& r, int64_t seqLen,
                int64_t maxPositions) {
  const double orig = r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                             : double(maxPositions);
  const auto& ext = seqLen > orig ? r.long_factor : r.short_factor;
  if (ext.size() != f.size())
    throw std::invalid_argument(
        std::string("model.rope_scaling.") + (seqLen > orig ? "long_factor" : "short_factor") +
        " has " + std::to_string(ext.size()) +
        " values: longrope needs rotary_dim / 2 = " + std::to_string(f.size()));
  for (size_t i = 0; i < f.size(); ++i) f[i] /= ext[i];
  if (r.attention_factor > 0) return r.attention_factor;
  const double factor = double(maxPositions) / orig;
  return factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(orig));
}

}  // namespace

RotaryFrequencies rotaryFrequencies(double theta, const ModelConfig::RopeScaling& r, int64_t dim,
                                    int64_t seqLen, int64_t maxPositions) {
  RotaryFrequencies out;
  if (maxPositions <= 0) maxPositions = seqLen;
  if (r.type == "dynamic" && dim > 2) {
    // NTK: the base grows once sequences outrun the model's positions.
    const double len = double(std::max(seqLen, maxPositions));
    theta *=
        std::pow(r.factor * len / double(maxPositions) - (r.factor - 1), double(dim) / (dim - 2));
  }
  out.invFreq = plainInvFreq(theta, dim);
  if (r.type == "linear")
    for (double& x : out.invFreq) x /= r.factor;
  else if (r.type == "llama3")
    llama3(out.invFreq, r, maxPositions);
  else if (r.type == "yarn")
    out.attentionFactor = yarn(out.invFreq, theta, r, dim, maxPositions);
  else if (r.type == "longrope")
    out.attentionFactor = longrope(out.invFreq, r, seqLen, maxPositions);
  return out;
}

std::vector<float> rotaryTable(const RotaryFrequencies& f, int64_t seqLen) {
  const int64_t half = int64_t(f.invFreq.size()), rd = 2 * half;
  std::vector<float> t(size_t(seqLen * rd));
  for (int64_t p = 0; p < seqLen; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(p) * f.invFreq[size_t(i)];
      t[size_t(p * rd + i)] = float(std::cos(a) * f.attentionFactor);
      t[size_t(p * rd + half + i)] = float(std::sin(a) * f.attentionFactor);
    }
  return t;
}

bool separateLocalRotary(const ArchSpec& a) {
  return a.slidingWindow > 0 && a.ropeLocalTheta > 0;
}

std::vector<float> rotaryTableOf(const ArchSpec& a, bool sliding) {
  // Gemma 3's sliding layers: their own base, default rotary (the scaling is the global one's).
  const bool local = sliding && separateLocalRotary(a);
  const auto f = rotaryFrequencies(local ? a.ropeLocalTheta : a.ropeTheta,
                                   local ? ModelConfig::RopeScaling{} : a.rope, a.rotaryDim(),
                                   a.seqLen, a.maxPositions);
  return rotaryTable(f, a.seqLen);
}

}  // namespace ts::core
