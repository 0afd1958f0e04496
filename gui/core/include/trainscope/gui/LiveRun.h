#pragma once
// Everything the dashboard shows about one run, fed by protocol events (from the engine's
// stdout, or rebuilt from the run database when re-attaching). Owns the data; views only
// read it on their own redraw timer (dirty() tells them whether anything changed).
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <QObject>
#include <QString>
#include <nlohmann/json.hpp>

#include "trainscope/core/plan/MemoryTable.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/gui/ChartReduction.h"
#include "trainscope/gui/SeriesBuffer.h"

namespace ts::gui {

enum class RunState { Starting, Running, Paused, Completed, Stopped, Failed, Detached };
QString toString(RunState s);

struct LogLine {
  double time = 0;
  QString level;  // info | warning | error
  QString text;
};

// The prediction to mark on each measured rank's bar: one entry per rank of `measured`, in its
// order, each the plan's entry of the same rank, else the plan's rank 0 (a plan made for one
// representative rank), else its first. Empty when the plan has no ranks.
core::MemoryReport predictionPerRank(const core::MemoryReport& measured,
                                     const core::MemoryReport& plan);

class LiveRun : public QObject {
  Q_OBJECT
 public:
  explicit LiveRun(QString name, QObject* parent = nullptr);

  void apply(const core::Event& e);
  void applyBatch(const std::vector<core::Event>& events);
  // A step that did not come from an event (database polling when re-attached).
  void applyStep(const core::StepEvent& s, double time);
  void addLog(const QString& level, const QString& text, double time = 0);
  void setState(RunState s, const QString& reason = {});
  void setTotalSteps(int64_t steps) { totalSteps_ = steps; }
  void setRunId(int64_t id) { runId_ = id; }
  void setPredicted(const core::MemoryReport& r) {
    predicted_ = r;
    alignPrediction();
    dirty_ = true;
  }

  // Smoothing weight for the EMA of the training loss (recomputed over the stored curve).
  void setSmoothing(double weight);
  double smoothing() const { return ema_.weight(); }

  const QString& name() const { return name_; }
  RunState state() const { return state_; }
  bool isActive() const;
  const QString& finishReason() const { return reason_; }
  int64_t runId() const { return runId_; }
  // Steps covered by profile windows (kernel_summary events), in arrival order.
  const std::vector<std::pair<int64_t, int64_t>>& profiledWindows() const { return profiled_; }
  // The profiled step nearest to `step` within `slack` steps, if any.
  std::optional<int64_t> profiledStepNear(int64_t step, int64_t slack = 0) const;
  int64_t lastStep() const { return lastStep_; }
  int64_t totalSteps() const { return totalSteps_; }
  int64_t tokens() const { return tokens_; }
  double lastTokensPerS() const { return lastTps_; }
  double lastLoss() const { return loss_.empty() ? 0.0 : loss_.lastY(); }
  int64_t skippedSteps() const { return skipped_; }
  // Seconds remaining at the recent pace; nullopt before there is a pace and while paused.
  std::optional<double> etaSeconds() const;
  double progress() const;  // 0..1

  const SeriesBuffer& loss() const { return loss_; }
  const SeriesBuffer& lossSmoothed() const { return lossEma_; }
  const SeriesBuffer& evalLoss() const { return evalLoss_; }
  // Distillation: the two terms of the objective per step (step events' distill_ce / _kl).
  const SeriesBuffer& distillCe() const { return distillCe_; }
  const SeriesBuffer& distillKl() const { return distillKl_; }
  // The model's parameter counts from memory events ({total, trainable, frozen, nf4_bytes,
  // teacher}), null until one arrives.
  const nlohmann::json& parameterCounts() const { return params_; }
  const SeriesBuffer& lr() const { return lr_; }
  const SeriesBuffer& tokensPerS() const { return tps_; }
  // Debiased EMA of tokens/s (per-step throughput swings several-fold on a busy machine).
  const SeriesBuffer& tokensPerSSmoothed() const { return tpsEma_; }
  // Exact-match accuracy in [0, 1] of the latest eval that sent one (addition task).
  std::optional<double> accuracy() const { return accuracy_; }
  const SeriesBuffer& lossScale() const { return lossScale_; }
  bool usesLossScale() const { return usesLossScale_; }
  // Device-tier total (current bytes) over steps, per rank.
  const std::vector<SeriesBuffer>& memoryOverTime() const { return memTime_; }
  const std::optional<core::MemoryReport>& measured() const { return measured_; }
  const std::optional<core::MemoryReport>& predicted() const { return predicted_; }
  // The latest memory event's `process` ({rss, peak_rss, tracked, ...}: the OS's count beside
  // the tracker's) and `device_memory` (CUDA: {used, total, tracked, untracked}); null when it
  // had none, as samples read back from the database do.
  const nlohmann::json& processMemory() const { return process_; }
  const nlohmann::json& deviceMemoryCount() const { return deviceCount_; }
  // The prediction matched to the measured ranks (predictionPerRank), once both exist.
  const std::optional<core::MemoryReport>& predictedPerRank() const { return predictedPerRank_; }
  // Several ranks: the rank count and the bytes rank 0 sent in collectives in the last step
  // (step events' `ranks` / `comm_bytes`); 1 and -1 when the run does not report them.
  int ranks() const { return ranks_; }
  int64_t lastCommBytes() const { return commBytes_; }
  const nlohmann::json& hello() const { return hello_; }
  const nlohmann::json& config() const { return config_; }
  const std::deque<LogLine>& log() const { return log_; }
  uint64_t logAppended() const { return logAppended_; }

  // The run's folder, where its engine listens for commands (ControlSocket.h); empty when
  // unknown. controllable(): an engine answered there at the last look (followed runs).
  const QString& runDir() const { return runDir_; }
  void setRunDir(const QString& dir) { runDir_ = dir; }
  bool controllable() const { return controllable_; }
  void setControllable(bool v) {
    if (v != controllable_) dirty_ = true;
    controllable_ = v;
  }
  // The socket path the engine announced (a `log` event's `control_socket`), if any.
  const QString& controlSocket() const { return controlSocket_; }

  bool dirty() const { return dirty_; }
  void clearDirty() { dirty_ = false; }
  size_t bytes() const;

 signals:
  void stateChanged(ts::gui::RunState state);

 private:
  void applyHello(const nlohmann::json& body);
  void applyLogFields(const nlohmann::json& body);
  void applyConfig(const nlohmann::json& body);
  void applyStepExtras(const nlohmann::json& body);
  void applyMemory(const nlohmann::json& body);
  void applyEval(const nlohmann::json& body);
  void applyFinished(const nlohmann::json& body, double time);
  void applyKernelSummary(const nlohmann::json& body);
  void alignPrediction();

  QString name_;
  RunState state_ = RunState::Starting;
  QString reason_;
  QString runDir_, controlSocket_;
  bool controllable_ = false;
  int64_t runId_ = 0;
  std::vector<std::pair<int64_t, int64_t>> profiled_;
  int64_t lastStep_ = 0, totalSteps_ = 0, tokens_ = 0, skipped_ = 0;
  double lastTps_ = 0;
  double firstTime_ = 0, lastTime_ = 0;
  int64_t firstStep_ = -1;
  double recentStepS_ = 0;  // EMA of seconds per step, for the ETA
  bool usesLossScale_ = false;
  bool dirty_ = true;
  DebiasedEma ema_{0.9};
  SeriesBuffer loss_, lossEma_, evalLoss_, lr_, tps_, lossScale_, distillCe_, distillKl_;
  DebiasedEma tpsSmoother_{0.9};
  SeriesBuffer tpsEma_{1 << 16};
  std::optional<double> accuracy_;
  nlohmann::json params_;
  std::vector<SeriesBuffer> memTime_;
  std::optional<core::MemoryReport> measured_, predicted_, predictedPerRank_;
  int ranks_ = 1;
  int64_t commBytes_ = -1;
  nlohmann::json hello_, config_, process_, deviceCount_;
  std::deque<LogLine> log_;
  uint64_t logAppended_ = 0;
  static constexpr size_t kMaxLogLines = 5000;
};

}  // namespace ts::gui
