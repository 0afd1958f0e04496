#pragma once
// Hand-built runs for the Compare and Runs-page tests: recorded through core::RunRecorder into
// a real SQLite store, from a spec whose formulas the tests also evaluate independently.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <QDir>
#include <QFile>
#include <QString>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/plan/MemoryTable.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/profiler/Aggregation.h"

namespace compare_test {

namespace core = ts::core;

struct RunSpec {
  std::string name = "run";
  std::string policy = "fp32";
  int microBatch = 16;
  int seqLen = 32;
  int zeroStage = 0;
  std::string checkpointing = "none";
  double peakLr = 3e-4;
  int steps = 40;  // steps 1..steps
  int spikeEvery = 37;
  double noise = 0;  // amplitude of a deterministic wiggle (screenshots)
  double lossFloor = 0.5;
  double tokensPerSBase = 9000;
  double secondsPerStep = 0.5;
  double t0 = 1.7e9;
  int evalEvery = 10;
  int memoryEvery = 10;
  double memoryScale = 1.0;  // measured bytes scale (bf16 halves activations, ...)
  bool checkpoint = false;   // writes a checkpoint file and its event at the last step
  bool profile = false;      // one `kernels` event with three spans
  std::string runDir;        // filled by recordRun
  std::string checkpointPath;

  // Deterministic pseudo-random value in [-1, 1) per step (the classic shader hash).
  static double hashNoise(int s) {
    const double x = std::sin(s * 12.9898) * 43758.5453;
    return 2.0 * (x - std::floor(x)) - 1.0;
  }
  int64_t tokensPerStep() const { return int64_t(microBatch) * seqLen; }
  // Loss with a spike every spikeEvery steps (so a downsampled envelope must keep it).
  double loss(int s) const {
    return lossFloor + 2.0 * std::exp(-s / 15.0) +
           (spikeEvery > 0 && s % spikeEvery == 0 ? 0.75 : 0.0) +
           noise * hashNoise(s) * std::exp(-s / 400.0);
  }
  double lr(int s) const { return peakLr * std::min(1.0, s / 10.0); }
  double tokensPerS(int s) const { return tokensPerSBase + 100.0 * (s % 5); }
  double evalLoss(int s) const { return lossFloor + 0.1 + 2.0 * std::exp(-s / 14.0); }
  double stepTime(int s) const { return t0 + 1.0 + s * secondsPerStep; }
  double finishedTime() const { return stepTime(steps) + 2.0; }
  // Measured device peak of category c at step s; the plan is a fixed figure per category.
  int64_t measuredPeak(int c, int s) const {
    const int64_t base[] = {4000000, 4000000, 8000000, 6000000, 1000000};
    const int64_t grow = c == 3 ? int64_t(s) * 2000 : 0;
    return int64_t((base[c] + grow) * memoryScale);
  }
  int64_t plannedPeak(int c) const {
    const int64_t plan[] = {4000000, 4000000, 8000000, 7000000, 1500000};
    return int64_t(plan[c] * memoryScale);
  }

  nlohmann::json config() const {
    core::RunConfig c;
    c.name = name;
    c.precision.policy = policy;
    c.train.micro_batch = microBatch;
    c.train.steps = steps;
    c.model.seq_len = seqLen;
    c.parallel.zero_stage = zeroStage;
    c.memory.checkpointing = checkpointing;
    c.optimizer.lr = peakLr;
    c.profile.enabled = profile;
    return core::toJson(c);
  }
};

inline nlohmann::json memoryJson(const RunSpec& sp, int step, bool planned) {
  core::MemoryReport rep;
  core::RankMemory r;
  for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
    auto& e = r.at(core::MemoryTier::Device, static_cast<core::MemoryCategory>(c));
    e.peak = planned ? sp.plannedPeak(c) : sp.measuredPeak(c, step);
    e.current = e.peak / 2;
  }
  rep.ranks.push_back(r);
  return core::toJson(rep);
}

// Records the run; returns its id (0 when the store was unusable).
inline int64_t recordRun(const std::string& db, const QString& dir, RunSpec& sp) {
  core::RunRecorder::Options o;
  o.dbPath = db;
  o.runDir = QDir(dir).filePath(QString::fromStdString(sp.name)).toStdString();
  o.name = sp.name;
  o.backend = "cpu";
  sp.runDir = o.runDir;
  core::RunRecorder rec(o);
  int64_t seq = 0;
  auto ev = [&](nlohmann::json e, const char* type, double time) {
    e["type"] = type;
    e["seq"] = seq++;
    e["time"] = time;
    rec.record(e);
  };
  ev({{"backend", "cpu"}, {"ranks", 1}, {"protocol", 1}}, "hello", sp.t0);
  ev({{"config", sp.config()}}, "config", sp.t0 + 0.1);
  ev(memoryJson(sp, 0, true), "memory_plan", sp.t0 + 0.2);
  for (int s = 1; s <= sp.steps; ++s) {
    ev({{"step", s},
        {"loss", sp.loss(s)},
        {"lr", sp.lr(s)},
        {"grad_norm", 1.0},
        {"tokens", s * sp.tokensPerStep()},
        {"tokens_per_s", sp.tokensPerS(s)},
        {"step_ms", sp.secondsPerStep * 1000}},
       "step", sp.stepTime(s));
    if (sp.evalEvery > 0 && s % sp.evalEvery == 0)
      ev({{"step", s}, {"loss", sp.evalLoss(s)}}, "eval", sp.stepTime(s) + 0.01);
    if (sp.memoryEvery > 0 && s % sp.memoryEvery == 0) {
      auto m = memoryJson(sp, s, false);
      m["step"] = s;
      ev(m, "memory", sp.stepTime(s) + 0.02);
    }
  }
  if (sp.checkpoint) {
    QDir().mkpath(QString::fromStdString(o.runDir));
    sp.checkpointPath = o.runDir + "/ckpt-" + std::to_string(sp.steps) + ".tsck";
    QFile f(QString::fromStdString(sp.checkpointPath));
    if (f.open(QIODevice::WriteOnly)) f.write("checkpoint");
    ev({{"step", sp.steps}, {"path", sp.checkpointPath}, {"checksum", "0"}}, "checkpoint",
       sp.stepTime(sp.steps) + 0.5);
  }
  if (sp.profile) {
    std::vector<ts::profiler::Span> spans;
    const char* names[] = {"matmul_fwd", "attention_fwd", "adamw_step"};
    for (int i = 0; i < 3; ++i) {
      ts::profiler::Span x;
      x.name = names[i];
      x.start_ns = 1000 + i * 5000;
      x.duration_ns = 4000;
      x.step = 2;
      spans.push_back(x);
    }
    for (auto& b : ts::profiler::kernelsBatches(spans, {0, 0, 2, 2, 0}))
      ev(b, "kernels", sp.stepTime(2) + 0.1);
  }
  ev({{"status", "completed"}}, "finished", sp.finishedTime());
  rec.close();
  return rec.runId();
}

}  // namespace compare_test
