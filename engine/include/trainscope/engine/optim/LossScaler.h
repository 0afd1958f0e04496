#pragma once
// Loss scaling for fp16 training with PyTorch GradScaler semantics (torch.amp):
//  - dynamic: start at `init`; a step whose gradients hold inf/NaN is skipped, the scale is
//    multiplied by backoff_factor and the clean-step counter resets; after growth_interval
//    consecutive clean steps the scale is multiplied by growth_factor (only if the result is
//    finite, as in PyTorch) and the counter resets.
//  - static: the scale is static_scale forever; non-finite steps are still skipped/counted.
// The scale is held in fp32 like PyTorch's, so the sequence of scales matches it exactly.
#include <cstdint>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"

namespace ts::engine {

class LossScaler {
 public:
  // Throws std::invalid_argument naming the precision.loss_scale field on bad values
  // (the config validator normally catches them first).
  explicit LossScaler(const core::LossScaleConfig& config = {});

  // Multiply the loss by this before backward; divide gradients by it before the update.
  float scale() const { return scale_; }
  // Record one step's overflow check. Returns true if the optimizer step should be applied,
  // false if it must be skipped (foundInfOrNan).
  bool update(bool foundInfOrNan);

  bool dynamic() const { return dynamic_; }
  int64_t skippedSteps() const { return skipped_; }
  // Consecutive clean steps since the last growth or backoff (PyTorch's _growth_tracker).
  int64_t growthTracker() const { return growthTracker_; }

  // Checkpoint state: {"scale", "growth_tracker", "skipped_steps", "mode"}. loadState throws
  // std::invalid_argument naming the bad key when a field is missing or out of range.
  nlohmann::json state() const;
  void loadState(const nlohmann::json& state);

 private:
  bool dynamic_ = true;
  float scale_ = 65536.0f;
  float growthFactor_ = 2.0f;
  float backoffFactor_ = 0.5f;
  int64_t growthInterval_ = 2000;
  int64_t growthTracker_ = 0;
  int64_t skipped_ = 0;
};

// True if any of g[0..n) (host memory) is inf or NaN (vectorised, OpenMP for large n). Gradients
// in a backend's memory are checked with Backend::countNonFinite.
bool hasInfOrNan(const float* g, int64_t n);

}  // namespace ts::engine
