#pragma once
// Helpers shared by the test binaries that train in-process (engine, activation, precision,
// validation): a fresh temp directory per test and process, an event recorder, and one call that
// runs a Trainer on the CPU backend (or another test backend, TestBackends.h) with every event
// recorded.
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "TestBackends.h"
#include "trainscope/engine/train/Trainer.h"
#include "trainscope/kernels/Backend.h"

namespace ts::testsupport {

namespace fs = std::filesystem;

// <tmp>/trainscope_<prefix>_<name>_<pid>, emptied first, so reruns and parallel ctest never mix.
inline fs::path tempDir(const std::string& prefix, const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("trainscope_" + prefix + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

struct Recorded {
  std::vector<std::pair<core::EventType, nlohmann::json>> events;
  std::vector<nlohmann::json> of(core::EventType t) const {
    std::vector<nlohmann::json> out;
    for (const auto& [type, f] : events)
      if (type == t) out.push_back(f);
    return out;
  }
};

// The tiny model and 2-digit addition task most trainer tests start from: 12 steps of 4×2
// sequences, an eval every 5 steps, one thread, no periodic checkpoints.
// The message of what `f` throws; "" when it throws nothing.
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// An empty scratch directory of this process under the temp dir: ts_<name>_<pid>.
inline std::filesystem::path scratchDir(const std::string& name) {
  const auto d =
      std::filesystem::temp_directory_path() / ("ts_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline core::RunConfig tinyAdditionConfig() {
  core::RunConfig c;
  c.model.layers = 2;
  c.model.heads = 2;
  c.model.d_model = 32;
  c.model.seq_len = 16;
  c.data.source = "synthetic";
  c.data.task = "addition";
  c.data.digits = 2;
  c.train.steps = 12;
  c.train.micro_batch = 4;
  c.train.grad_accum = 2;
  c.train.eval_every = 5;
  c.train.checkpoint_every = 0;
  c.device.threads = 1;
  return c;
}

struct RunOptions {
  std::string backend = "cpu";  // a test backend name (TestBackends.h)
  std::string resume;           // checkpoint to resume from
  int exactMatchSamples = 16;   // addition task: held-out problems decoded per eval
  int evalBatches = -1;         // -1: the trainer's default
  std::function<void(engine::Trainer&)> before;  // called once, before run()
  // Sees each event with the trainer, e.g. to post commands mid-run.
  std::function<void(engine::Trainer&, core::EventType, const nlohmann::json&)> onEvent;
  std::function<void(kernels::Backend&)> after;  // called with the backend once run() returned
};

// Runs `config` in-process on ro.backend (the CPU backend by default); every event lands in
// `rec`.
inline engine::TrainResult runTrainer(const core::RunConfig& config, Recorded& rec,
                                      const std::string& runDir, const RunOptions& ro = {}) {
  auto backend = makeTestBackend(ro.backend);
  backend->setThreads(config.device.threads);
  engine::TrainerOptions o;
  o.runDir = runDir;
  o.resumePath = ro.resume;
  o.exactMatchSamples = ro.exactMatchSamples;
  if (ro.evalBatches >= 0) o.evalBatches = ro.evalBatches;
  engine::Trainer* self = nullptr;
  o.emit = [&](core::EventType t, nlohmann::json f, bool) {
    if (ro.onEvent && self) ro.onEvent(*self, t, f);
    rec.events.emplace_back(t, std::move(f));
  };
  engine::Trainer trainer(config, backend.get(), o);
  self = &trainer;
  if (ro.before) ro.before(trainer);
  auto result = trainer.run();
  if (ro.after) ro.after(*backend);
  return result;
}

}  // namespace ts::testsupport
