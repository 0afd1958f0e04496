// A run as named steps: setup, resume, the step loop, the final checkpoint and the result.
#include "TrainingSession.h"

namespace ts::engine {

TrainingSession::TrainingSession(const core::RunConfig& config, kernels::Backend* backend,
                                 const TrainerOptions& options, MemoryTracker& tracker,
                                 std::function<std::deque<core::Command>()> takeCommands)
    : config_(config),
      backend_(backend),
      options_(options),
      tracker_(tracker),
      takeCommands_(std::move(takeCommands)) {}

TrainingSession::~TrainingSession() = default;

void TrainingSession::emit(core::EventType type, nlohmann::json fields, bool droppable) {
  if (options_.emit) options_.emit(type, std::move(fields), droppable);
}

void TrainingSession::log(const std::string& message) {
  emit(core::EventType::Log, {{"message", message}});
}

void TrainingSession::warn(const std::string& message) {
  emit(core::EventType::Warning, {{"message", message}});
}

TrainResult TrainingSession::run() {
  try {
    checkSupported();
    setUpRanks();
    loadData();
    buildModel();
    loadBase();
    buildOptimizer();
    logModel();
    loadTeacher();
    logPrecision();
    makeLossScaler();
    resume();
  } catch (const SetupFailure& f) {
    emit(core::EventType::Error, {{"message", f.reason}, {"fatal", true}});
    result_.status = "failed";
    result_.reason = f.reason;
    result_.badInput = f.badInput;
    return result_;
  }
  // ZeRO 2/3: the setup peak (initialization and loading, which touch only this rank's shard)
  // is reported on its own, and the peaks from here on are the training's.
  if (dp_ && dp_->stage() >= 2) {
    setupPeak_ = tracker_.totalPeak();
    tracker_.resetPeaks();
  }
  loop();
  return finish();
}

TrainResult TrainingSession::finish() {
  result_.steps = step_;
  result_.bestValLoss = bestVal_;
  result_.tokensPerSecond = sumStepMs_ > 0 ? tokensHere_ / (sumStepMs_ / 1000.0) : 0;
  result_.memory = tracker_.report();
  result_.peakBytes = tracker_.totalPeak();
  if (failed_) {
    result_.status = "failed";
    return result_;
  }
  const bool stopped = step_ < config_.train.steps;
  saveCheckpoint(stopped ? "stopped" : "final");
  if (stopped) {
    result_.status = "stopped";
    result_.interrupted = interrupted();
    result_.reason = result_.interrupted ? "interrupted by signal at step " + std::to_string(step_)
                                         : "stop requested at step " + std::to_string(step_);
  } else {
    result_.status = "completed";
    result_.reason = "trained " + std::to_string(step_) + " steps";
  }
  return result_;
}

}  // namespace ts::engine
