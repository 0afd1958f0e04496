#include "trainscope/core/config/Schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ts::core {

double learningRate(const RunConfig& config, int64_t step) {
  const double maxLr = config.optimizer.lr;
  const double minLr = config.schedule.min_lr;
  const int64_t warmup = std::max<int64_t>(0, config.schedule.warmup_steps);
  const int64_t total = config.train.steps;
  step = std::max<int64_t>(0, step);
  if (step < warmup) return maxLr * static_cast<double>(step) / static_cast<double>(warmup);

  const std::string& type = config.schedule.type;
  if (type != "linear" && type != "cosine") return maxLr;
  // A run no longer than its warmup has nothing left to decay over: it sits at the floor.
  double progress = 1.0;
  if (total > warmup) {
    progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    progress = std::clamp(progress, 0.0, 1.0);
  }
  if (type == "linear") return minLr + (maxLr - minLr) * (1.0 - progress);
  return minLr + (maxLr - minLr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

std::vector<int64_t> scheduleCurveSteps(const RunConfig& config, int points) {
  std::vector<int64_t> steps;
  if (points <= 0) return steps;
  const int64_t last = std::max<int64_t>(0, config.train.steps - 1);
  steps.reserve(static_cast<size_t>(points));
  for (int i = 0; i < points; ++i) {
    if (points == 1) {
      steps.push_back(0);
      break;
    }
    // Rounded so both ends are hit exactly.
    const double x = static_cast<double>(last) * i / (points - 1);
    steps.push_back(static_cast<int64_t>(std::llround(x)));
  }
  return steps;
}

std::vector<double> scheduleCurve(const RunConfig& config, int points) {
  std::vector<double> lrs;
  for (int64_t s : scheduleCurveSteps(config, points)) lrs.push_back(learningRate(config, s));
  return lrs;
}

double curriculumFraction(const RunConfig& config, int64_t step) {
  const CurriculumConfig& c = config.curriculum;
  if (c.type == "none" || c.full_at <= 0.0 || config.train.steps <= 0) return 1.0;
  const double fullStep = c.full_at * static_cast<double>(config.train.steps);
  const double t = std::clamp(static_cast<double>(std::max<int64_t>(0, step)) / fullStep, 0.0, 1.0);
  const double c0 = kCurriculumStart;
  if (c.pacing == "root") return std::min(1.0, std::sqrt(c0 * c0 + (1.0 - c0 * c0) * t));
  if (c.pacing == "step") return c0 + (1.0 - c0) * std::floor(4.0 * t) / 4.0;
  return c0 + (1.0 - c0) * t;  // linear (and the fallback)
}

}  // namespace ts::core
