#include "trainscope/engine/optim/LossScaler.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ts::engine {

namespace {
[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw std::invalid_argument("precision.loss_scale." + field + ": " + what);
}
}  // namespace

LossScaler::LossScaler(const core::LossScaleConfig& c) {
  if (c.mode != "dynamic" && c.mode != "static")
    bad("mode", "'" + c.mode + "' is not allowed (dynamic | static)");
  dynamic_ = c.mode == "dynamic";
  if (dynamic_) {
    if (!(c.init > 0) || !std::isfinite(float(c.init))) bad("init", "must be a finite value > 0");
    if (!(c.growth_factor > 1)) bad("growth_factor", "must be > 1");
    if (!(c.backoff_factor > 0 && c.backoff_factor < 1)) bad("backoff_factor", "must be in (0, 1)");
    if (c.growth_interval < 1) bad("growth_interval", "must be >= 1");
    scale_ = float(c.init);
  } else {
    if (!(c.static_scale > 0) || !std::isfinite(float(c.static_scale)))
      bad("static_scale", "must be a finite value > 0");
    scale_ = float(c.static_scale);
  }
  growthFactor_ = float(c.growth_factor);
  backoffFactor_ = float(c.backoff_factor);
  growthInterval_ = c.growth_interval;
}

bool LossScaler::update(bool foundInfOrNan) {
  if (foundInfOrNan) ++skipped_;
  if (!dynamic_) return !foundInfOrNan;
  // Mirrors torch's _amp_update_scale_ (fp32 arithmetic on the scale).
  if (foundInfOrNan) {
    scale_ = scale_ * backoffFactor_;
    growthTracker_ = 0;
    return false;
  }
  const int64_t successful = growthTracker_ + 1;
  if (successful == growthInterval_) {
    const float grown = scale_ * growthFactor_;
    if (std::isfinite(grown)) scale_ = grown;
    growthTracker_ = 0;
  } else {
    growthTracker_ = successful;
  }
  return true;
}

nlohmann::json LossScaler::state() const {
  return {{"mode", dynamic_ ? "dynamic" : "static"},
          {"scale", scale_},
          {"growth_tracker", growthTracker_},
          {"skipped_steps", skipped_}};
}

void LossScaler::loadState(const nlohmann::json& s) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!s.is_object() || !s.contains(key) || !s[key].is_number())
      throw std::invalid_argument(std::string("loss scaler state: '") + key +
                                  "' is missing or not a number");
    return s[key];
  };
  const double scale = need("scale").get<double>();
  const auto tracker = need("growth_tracker").get<int64_t>();
  const auto skipped = need("skipped_steps").get<int64_t>();
  if (!(scale > 0) || !std::isfinite(float(scale)))
    throw std::invalid_argument("loss scaler state: 'scale' must be a finite value > 0");
  if (tracker < 0 || (dynamic_ && tracker >= growthInterval_))
    throw std::invalid_argument("loss scaler state: 'growth_tracker' must be in [0, " +
                                std::to_string(growthInterval_) + ")");
  if (skipped < 0) throw std::invalid_argument("loss scaler state: 'skipped_steps' must be >= 0");
  if (s.contains("mode") && s["mode"] != (dynamic_ ? "dynamic" : "static"))
    throw std::invalid_argument("loss scaler state: 'mode' " + s["mode"].dump() +
                                " does not match the configured mode");
  // A static scale is configuration, not state: the configured value wins.
  if (dynamic_) scale_ = float(scale);
  growthTracker_ = dynamic_ ? tracker : 0;
  skipped_ = skipped;
}

bool hasInfOrNan(const float* g, int64_t n) {
  // Exponent all ones <=> inf or NaN; an integer OR-reduction vectorises without FP compares.
  uint32_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &g[i], sizeof u);
    bad |= uint32_t((u & 0x7F800000u) == 0x7F800000u);
  }
  return bad != 0;
}

}  // namespace ts::engine
