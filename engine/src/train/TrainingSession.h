#pragma once
// One run of the training loop, as named steps over the state they share: setup (ranks, data,
// model, optimizer, teacher), resume, the step loop, checkpoints, evaluation and control
// commands. Trainer::run makes one and runs it; the files of train/ hold its parts:
// TrainingSetup.cpp, TrainingCheckpoints.cpp, TrainingEval.cpp, TrainingControl.cpp and
// TrainingStep.cpp.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/loss/DistillationLoss.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/LossScaler.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/engine/parallel/Communicator.h"
#include "trainscope/engine/parallel/DataParallel.h"
#include "trainscope/engine/train/Trainer.h"
#include "trainscope/profiler/ProfileSchedule.h"

namespace ts::engine {

// A setup step that cannot go on: the run fails with this reason (badInput: the config, data
// or checkpoint given is at fault). Thrown by the steps, turned into the result by run().
struct SetupFailure {
  std::string reason;
  bool badInput = true;
};

class TrainingSession {
 public:
  TrainingSession(const core::RunConfig& config, kernels::Backend* backend,
                  const TrainerOptions& options, MemoryTracker& tracker,
                  std::function<std::deque<core::Command>()> takeCommands);
  ~TrainingSession();
  TrainResult run();

 private:
  using Clock = std::chrono::steady_clock;

  // Events.
  void emit(core::EventType type, nlohmann::json fields, bool droppable = false);
  void log(const std::string& message);
  void warn(const std::string& message);
  [[noreturn]] void outOfMemory();

  // Setup (TrainingSetup.cpp), in the order run() calls them.
  void checkSupported();
  void setUpRanks();
  void loadData();
  void buildModel();
  void loadBase();
  void buildOptimizer();
  void logModel();
  void loadTeacher();
  void logPrecision();
  void makeLossScaler();

  // Checkpoints (TrainingCheckpoints.cpp).
  void resume();
  bool saveCheckpoint(const char* why);

  // Evaluation and the events that gather ranks (TrainingEval.cpp).
  void evaluate();
  void validationLoss(nlohmann::json& ev);
  void exactMatch(nlohmann::json& ev);
  void memoryEvent();
  void emitWindow(const profiler::ProfileWindow& window);

  // Control commands (TrainingControl.cpp).
  void drainCommands();
  void syncControl();
  bool interrupted() const;
  bool stopNow() const;

  // The step loop (TrainingStep.cpp).
  void loop();
  double readBatch();
  struct MicroBatchSums {
    double lossSum = 0;
    DistillationSums distill;
    int64_t count = 0;
  };
  MicroBatchSums forwardBackward(float lossScale);
  struct Update {
    bool skipped = false;
    double gradNorm = 0.0;
    double lr = 0.0;
  };
  Update applyGradients(float lossScale);
  void stepEvent(const MicroBatchSums& sums, double loss, const Update& update, double stepMs,
                 float lossScale, double difficulty);
  void failOnNonFiniteLoss(double loss);
  void afterStep();
  TrainResult finish();

  const core::RunConfig& config_;
  kernels::Backend* backend_;
  const TrainerOptions& options_;
  MemoryTracker& tracker_;
  std::function<std::deque<core::Command>()> takeCommands_;
  TrainResult result_;

  // Ranks.
  std::unique_ptr<Communicator> single_;
  Communicator* comm_ = nullptr;
  int ranks_ = 1, rank_ = 0;

  // Data and shapes.
  std::unique_ptr<Dataset> data_;
  int dataVocab_ = 0, vocab_ = 0;
  int B_ = 0, T_ = 0, accum_ = 1;
  int64_t perMicro_ = 0;

  // Model, optimizer, data parallel, teacher.
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<DataParallel> dp_;
  std::string baseChecksum_;
  MemoryTracker teacherTracker_;
  std::unique_ptr<Gpt> teacher_;
  std::optional<DistillationLoss> distillLoss_;
  nlohmann::json paramCounts_;
  std::optional<LossScaler> scaler_;
  nlohmann::json configJson_;
  std::string ckptDir_;

  // Progress.
  int64_t step_ = 0, tokens_ = 0;
  double bestVal_ = NAN;
  int64_t setupPeak_ = -1;
  CompressionStats compStats_;  // of the last training micro-batch
  std::optional<profiler::ProfileController> profile_;
  int64_t firstStep_ = 0;
  double sumStepMs_ = 0;
  int64_t tokensHere_ = 0;
  bool failed_ = false;
  std::vector<int32_t> inputs_, targets_;

  // Control.
  bool paused_ = false, stopRequested_ = false, ckptRequested_ = false;
  int profileAsk_ = 0;  // steps a profile command asked for (applied in syncControl)
};

}  // namespace ts::engine
