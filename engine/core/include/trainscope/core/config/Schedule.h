#pragma once
// Learning-rate schedules and curriculum pacing. Qt-free and compute-free so the GUI can
// preview exactly what the engine will use (../shared/reference.md, "Cosine with warmup").
#include <cstdint>
#include <vector>

#include "trainscope/core/config/Config.h"

namespace ts::core {

// Learning rate for 0-based `step` of a run of config.train.steps steps.
// Warmup (any type): lr = max_lr * step / warmup while step < warmup (step 0 -> 0).
// After warmup, progress p = (step - warmup) / (steps - warmup), clamped to [0, 1]:
//   constant: max_lr
//   linear:   min_lr + (max_lr - min_lr) * (1 - p)
//   cosine:   min_lr + (max_lr - min_lr) * 0.5 * (1 + cos(pi * p))
// max_lr = config.optimizer.lr, min_lr = config.schedule.min_lr (0 = decay to zero).
// Steps past the end keep the final value. Unknown types behave as constant.
double learningRate(const RunConfig& config, int64_t step);

// `points` evenly spaced samples of learningRate over [0, steps - 1] (both ends included)
// for the GUI preview; points <= 0 gives an empty vector, points == 1 gives step 0.
std::vector<double> scheduleCurve(const RunConfig& config, int points);
// The steps at which scheduleCurve samples, so a chart can label its x axis.
std::vector<int64_t> scheduleCurveSteps(const RunConfig& config, int points);

// Curriculum pacing: the fraction (0, 1] of the full difficulty in use at `step`; the engine
// passes it to Dataset::setDifficulty before each training batch. curriculum.type "none"
// (or full_at <= 0, or steps <= 0) -> always 1. Otherwise t = step / (full_at * steps),
// clamped to [0, 1], and with start fraction c0 = kCurriculumStart (competence-based
// pacing, Platanios et al. 2019):
//   linear: c0 + (1 - c0) * t
//   root:   sqrt(c0^2 + (1 - c0^2) * t)
//   step:   c0 + (1 - c0) * floor(4 t) / 4   (four equal stages)
// All reach exactly 1 at step = full_at * steps and stay there.
inline constexpr double kCurriculumStart = 0.1;
double curriculumFraction(const RunConfig& config, int64_t step);

}  // namespace ts::core
