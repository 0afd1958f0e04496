#pragma once
// The training loop. It knows nothing about stdout or the database: every event goes through
// the `emit` callback (type + fields; the caller stamps seq/time, records and writes it).
// Control (stop/pause/resume/checkpoint/profile) is thread-safe and takes effect at the next
// step boundary, so a step always completes.
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

class Communicator;

struct TrainerOptions {
  std::string runDir;      // checkpoints go to runDir/checkpoints
  std::string resumePath;  // checkpoint directory or its state.json; empty = fresh run
  // Receives every event (type, fields). `droppable` marks timeline batches.
  std::function<void(core::EventType type, nlohmann::json fields, bool droppable)> emit;
  // Set asynchronously (signal handler): stop after the current step, final checkpoint.
  const std::atomic<bool>* interrupt = nullptr;
  int keepCheckpoints = 3;  // newest checkpoints kept on disk
  int evalBatches = 8;      // validation batches per eval (at most)
  int exactMatchSamples = 64;
  // The ranks of a parallel run (null: one rank). Rank 0 alone emits events and writes
  // checkpoints; every rank trains its share of each batch.
  Communicator* comm = nullptr;
};

struct TrainResult {
  std::string status = "failed";  // completed | stopped | failed
  std::string reason;
  bool badInput = false;     // failed because of the config/data/checkpoint given
  bool interrupted = false;  // stopped by a signal
  int64_t steps = 0;         // completed optimizer steps (including resumed ones)
  double finalLoss = NAN;
  double finalValLoss = NAN;
  double bestValLoss = NAN;
  double accuracy = NAN;       // exact match (addition), last eval
  double tokensPerSecond = 0;  // mean over this process's steps
  int64_t peakBytes = 0;       // tracker peak over all categories
  core::MemoryReport memory;
  std::string lastCheckpoint;
};

class Trainer {
 public:
  Trainer(core::RunConfig config, kernels::Backend* backend, TrainerOptions options);
  ~Trainer();
  TrainResult run();

  // Thread-safe, from the stdin reader.
  void post(const core::Command& command);
  MemoryTracker& tracker() { return tracker_; }

 private:
  struct State;
  core::RunConfig config_;
  kernels::Backend* backend_;
  TrainerOptions options_;
  MemoryTracker tracker_;
  std::mutex mutex_;
  std::deque<core::Command> commands_;
};

// Rejects config features this engine does not implement yet (each with its JSON path and
// why); empty = runnable.
std::vector<core::ConfigIssue> unsupportedFeatures(const core::RunConfig& config);

}  // namespace ts::engine
